"""``sluice bench soak``: the soak of issue 8 (``make soak`` runs the 10-minute one)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from sluice.cli_common import JsonOpt, fail, write_json


def soak_cmd(
    duration_s: Annotated[float, typer.Option(help="Seconds of load at the soak rate.")] = 600.0,
    warmup_s: Annotated[
        float, typer.Option(help="RSS growth is measured from the end of this.")
    ] = 60.0,
    workers: Annotated[int, typer.Option(help="Synthetic worker processes.")] = 2,
    base_ms: Annotated[float, typer.Option(help="Synthetic ms per batch.")] = 20.0,
    load_fraction: Annotated[float, typer.Option(help="Load as a share of capacity.")] = 0.7,
    sample_s: Annotated[float, typer.Option(help="Seconds between samples.")] = 5.0,
    result_ttl_s: Annotated[int, typer.Option(help="The soak config's result_ttl_s.")] = 30,
    idempotency_ttl_s: Annotated[
        int, typer.Option(help="The soak config's idempotency_ttl_s.")
    ] = 30,
    idempotency_fraction: Annotated[
        float, typer.Option(help="Share of jobs sent with an Idempotency-Key.")
    ] = 0.2,
    max_rss_growth_pct: Annotated[float, typer.Option(help="RSS growth limit, %.")] = 10.0,
    seed: Annotated[int, typer.Option(help="Workload and arrival seed.")] = 1,
    workdir: Annotated[Path, typer.Option(help="Config and process logs.")] = Path(
        "/tmp/sluice-bench-soak"
    ),
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    json_path: JsonOpt = None,
    markdown_path: Annotated[
        Path | None, typer.Option("--markdown", help="Also write the tables as Markdown.")
    ] = None,
) -> None:
    """Soak the real stack at 70% of capacity: memory, Redis keys, errors, latency over time."""
    from rich.console import Console

    from sluicebench.loadgen.soak import SoakParams, run_soak
    from sluicebench.loadgen.soak_report import print_soak

    if not 0 < load_fraction <= 1 or warmup_s >= duration_s:
        fail("need 0 < --load-fraction <= 1 and --warmup-s < --duration-s", 2)
    params = SoakParams(
        workers=workers,
        base_ms=base_ms,
        duration_s=duration_s,
        warmup_s=warmup_s,
        sample_s=sample_s,
        load_fraction=load_fraction,
        result_ttl_s=result_ttl_s,
        idempotency_ttl_s=idempotency_ttl_s,
        idempotency_fraction=idempotency_fraction,
        max_rss_growth_pct=max_rss_growth_pct,
        seed=seed,
        progress=progress,
    )
    out = run_soak(workdir, params)
    print_soak(out, Console() if sys.stdout.isatty() else Console(width=150))
    write_json(json_path, out)
    if markdown_path is not None:
        from sluicebench.loadgen.soak_markdown import markdown

        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(markdown(out))
    if not out["verdict"]["passed"]:
        raise typer.Exit(1)
