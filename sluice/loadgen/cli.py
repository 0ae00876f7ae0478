"""``sluice bench load``: drive any gateway with a workload and report what it did."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sluice.cli_common import JsonOpt, fail, write_json
from sluice.errors import ConfigError


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    bench_app.command("load")(load_cmd)


def load_cmd(
    url: Annotated[str, typer.Option(help="The gateway's base URL.")],
    model: Annotated[str, typer.Option("--model", "-m", help="Model name.")],
    rate: Annotated[float | None, typer.Option(help="Open loop: Poisson jobs/s.")] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="Closed loop: jobs kept outstanding.")
    ] = None,
    trace: Annotated[
        Path | None, typer.Option(help="Open loop: CSV with time_s and cost (words) columns.")
    ] = None,
    duration_s: Annotated[float | None, typer.Option(help="Stop sending after this.")] = None,
    jobs: Annotated[int | None, typer.Option(help="Stop after sending this many.")] = None,
    warmup_s: Annotated[float, typer.Option(help="Leave jobs sent before this out.")] = 0.0,
    mix: Annotated[
        str, typer.Option(help="Input lengths in words, LO-HI:WEIGHT,...")
    ] = "5-20:0.70,40-100:0.25,200-300:0.05",
    seed: Annotated[int, typer.Option(help="Workload and arrival seed.")] = 1,
    timeout_s: Annotated[float, typer.Option(help="Give up on a job after this.")] = 120.0,
    submit_only: Annotated[
        bool, typer.Option(help="Only POST (the gateway's submit capacity).")
    ] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    json_path: JsonOpt = None,
) -> None:
    """Load a gateway: open loop (--rate, --trace) or closed (--concurrency); latency per bucket."""
    from sluice.loadgen.driver import LoadSpec, run_load
    from sluice.loadgen.report import print_summary
    from sluice.loadgen.workload import load_trace, parse_mix

    try:
        spec = LoadSpec(
            url=url, model=model, rate=rate, concurrency=concurrency,
            trace=load_trace(trace) if trace else None, duration_s=duration_s, jobs=jobs,
            warmup_s=warmup_s, bands=parse_mix(mix), seed=seed, job_timeout_s=timeout_s,
            submit_only=submit_only, progress=progress,
        )  # fmt: skip
        spec.check()
        out = run_load(spec)
    except ConfigError as e:
        fail(str(e), 2)
    print_summary(out)
    write_json(json_path, out)
    if out["sent"] and not out["succeeded"]:
        raise typer.Exit(1)  # nothing got through: a script should notice
