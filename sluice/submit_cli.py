"""``sluice submit``: queue inputs through a gateway and (optionally) wait for results."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sluice.client import Client, JobFailed, SluiceClientError


def read_inputs(inputs: list[str], file: Path | None) -> list[Any]:
    """Arguments are text; file lines are JSON when they parse, else text ('-' = stdin)."""
    values: list[Any] = list(inputs)
    if file is not None:
        lines = sys.stdin.read().splitlines() if str(file) == "-" else file.read_text().splitlines()
        for line in lines:
            if not line.strip():
                continue
            try:
                values.append(json.loads(line))
            except json.JSONDecodeError:
                values.append(line)
    return values


def _summary(result: Any) -> str:
    if isinstance(result, dict) and isinstance(result.get("embedding"), list):
        vec = result["embedding"]
        return f"embedding[{len(vec)}] {', '.join(f'{v:.3f}' for v in vec[:3])} ..."
    text = json.dumps(result)
    return text if len(text) <= 60 else text[:57] + "..."


def jobs_table(jobs: list[dict[str, Any]]) -> Table:
    table = Table(title="Jobs", title_justify="left")
    for col in ("id", "status", "bucket", "cost", "wait ms", "run ms", "result / error"):
        table.add_column(col)
    for j in jobs:
        t = j.get("timings") or {}
        err = j.get("error")
        outcome = f"{err['type']}: {err['message']}" if err else _summary(j.get("result"))
        table.add_row(
            j["id"],
            j["status"],
            str(j.get("bucket", "")),
            str(j.get("cost", "")),
            str(t.get("queue_wait_ms", "")),
            str(t.get("run_ms", "")),
            outcome if j["status"] not in ("queued", "running") else "",
        )
    return table


def submit(
    url: str,
    model: str,
    values: list[Any],
    *,
    priority: str | None,
    deadline_ms: int | None,
    wait: bool,
    timeout_s: float,
    api_key: str | None = None,
) -> list[dict[str, Any]]:
    with Client(url, timeout_s=timeout_s + 10, api_key=api_key) as c:
        opts: dict[str, Any] = {"priority": priority, "deadline_ms": deadline_ms}
        jobs = (
            c.submit_many(model, values, **opts)
            if len(values) > 1
            else [c.submit(model, values[0], **opts)]
        )
        if not wait:
            return jobs
        done = []
        for job in jobs:
            try:
                done.append(c.result(job["id"], timeout_s=timeout_s))
            except JobFailed as e:
                done.append(e.job)
        return done


def run_submit(
    url: str,
    model: str,
    values: list[Any],
    *,
    priority: str | None,
    deadline_ms: int | None,
    wait: bool,
    timeout_s: float,
    as_json: bool,
    api_key: str | None = None,
) -> int:
    """Prints the jobs; returns the exit code (1 if any waited-for job did not succeed)."""
    try:
        jobs = submit(
            url,
            model,
            values,
            priority=priority,
            deadline_ms=deadline_ms,
            wait=wait,
            timeout_s=timeout_s,
            api_key=api_key,
        )
    except SluiceClientError as e:
        print(f"sluice: error: {e}", file=sys.stderr)
        return 1
    except TimeoutError as e:
        print(f"sluice: error: {e}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps(jobs, indent=2))
    else:
        Console(width=None if sys.stdout.isatty() else 200).print(jobs_table(jobs))
    return 1 if wait and any(j["status"] != "succeeded" for j in jobs) else 0
