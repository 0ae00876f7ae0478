"""Following a bulk job from the command line: a progress bar, then the output."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from sluice.client import Client


def follow(c: Client, view: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Poll until the bulk job ends, drawing done/total, failures, rate and ETA."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[extra]}"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task(view["id"], total=view["counts"]["total"], extra="")

        def draw(v: dict[str, Any]) -> None:
            n = v["counts"]
            rate = f"{v['rate_per_s']:.1f}/s" if v.get("rate_per_s") else ""
            bar.update(task, completed=n["done"], extra=f"{v['state']} failed {n['failed']} {rate}")

        return c.bulk_wait(view["id"], timeout_s=timeout_s, on_progress=draw)


def write_output(c: Client, bulk_id: str, path: Path | None) -> int:
    """Write the output lines to ``path`` (stdout when None); returns how many."""
    import json

    out = sys.stdout if path is None else path.open("w")
    n = 0
    try:
        for line in c.bulk_output(bulk_id):
            out.write(json.dumps(line, separators=(",", ":")) + "\n")
            n += 1
    finally:
        if path is not None:
            out.close()
    return n
