"""``sluice bench load`` (drive a running gateway) and ``sluice bench stack`` (issue 6's
benchmarks 1 and 2 on a stack of processes it starts): the load generator's commands,
registered by :mod:`sluicebench.cli`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sluice.cli_common import ApiKeyOpt, JsonOpt, fail, write_json
from sluice.errors import ConfigError

if TYPE_CHECKING:
    from sluicebench.loadgen.mixed_bench import MixedParams


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
    engine: Annotated[
        str, typer.Option(help="HTTP engine: auto (lean for http://), lean or httpx.")
    ] = "auto",
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    json_path: JsonOpt = None,
    api_key: ApiKeyOpt = None,
) -> None:
    """Load a gateway: open loop (--rate, --trace) or closed (--concurrency); latency per bucket."""
    from sluicebench.loadgen.driver import LoadSpec, run_load
    from sluicebench.loadgen.workload import load_trace, parse_mix

    if api_key:  # the HTTP engines send $SLUICE_API_KEY
        os.environ["SLUICE_API_KEY"] = api_key

    try:
        spec = LoadSpec(
            url=url,
            model=model,
            rate=rate,
            concurrency=concurrency,
            trace=load_trace(trace) if trace else None,
            duration_s=duration_s,
            jobs=jobs,
            warmup_s=warmup_s,
            bands=parse_mix(mix),
            seed=seed,
            job_timeout_s=timeout_s,
            submit_only=submit_only,
            engine=engine,
            progress=progress,
        )
        spec.check()
        out = run_load(spec)
    except ConfigError as e:
        fail(str(e), 2)
    _report_load(out, json_path)


def _report_load(out: dict[str, Any], json_path: Path | None) -> None:
    """The summary, the JSON, and exit status 1 if nothing got through."""
    from sluicebench.loadgen.report import print_summary

    print_summary(out, _console())
    write_json(json_path, out)
    if out["sent"] and not out["succeeded"]:
        raise typer.Exit(1)  # nothing got through: a script should notice


def stack_cmd(
    only: Annotated[str, typer.Option(help="scaling, mixed or both.")] = "both",
    workers: Annotated[str, typer.Option(help="Benchmark 1: worker counts.")] = "1,2,5,10",
    base_ms: Annotated[float, typer.Option(help="Benchmark 1: synthetic ms per batch.")] = 10.0,
    max_batch: Annotated[int, typer.Option(help="Benchmark 1: jobs per batch.")] = 1,
    gateway_workers: Annotated[int, typer.Option(help="uvicorn processes.")] = 1,
    scaling_duration_s: Annotated[float, typer.Option(help="Benchmark 1: s per phase.")] = 6.0,
    mixed_workers: Annotated[int, typer.Option(help="Benchmark 2: workers.")] = 4,
    mixed_batch: Annotated[int, typer.Option(help="Benchmark 2: max_batch.")] = 8,
    mixed_base_ms: Annotated[float, typer.Option(help="Benchmark 2: ms per batch.")] = 10.0,
    per_token_ms: Annotated[float, typer.Option(help="Benchmark 2: ms per padded word.")] = 1.0,
    mixed_duration_s: Annotated[float, typer.Option(help="Benchmark 2: s per case.")] = 30.0,
    pin_short: Annotated[
        int, typer.Option(help="Benchmark 2: of the bucketed workers, this many short-only.")
    ] = 0,
    util_of: Annotated[
        str, typer.Option(help="Benchmark 2: utilisation of the buckets' capacity, or own.")
    ] = "buckets",
    overlap: Annotated[
        bool, typer.Option(help="Benchmark 2: workers prefetch the next batch.")
    ] = True,
    workdir: Annotated[Path, typer.Option(help="Configs and process logs.")] = Path(
        "/tmp/sluice-bench-stack"
    ),
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
    json_path: JsonOpt = None,
) -> None:
    """Issue 6 benchmarks 1 (scaling) and 2 (mixed load) on a real stack of processes."""
    from sluicebench.loadgen.mixed_bench import MixedParams

    if only not in ("both", "scaling", "mixed") or util_of not in ("buckets", "own"):
        fail("--only is scaling, mixed or both; --util-of is buckets or own", 2)
    workdir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {}
    if only in ("both", "scaling"):
        out["scaling"] = _stack_scaling(
            workdir,
            [int(n) for n in workers.split(",") if n],
            base_ms=base_ms,
            max_batch=max_batch,
            duration_s=scaling_duration_s,
            gateway_workers=gateway_workers,
            progress=progress,
        )
        write_json(json_path, out)  # the first half survives a failure in the second
    if only in ("both", "mixed"):
        params = MixedParams(
            workers=mixed_workers,
            max_batch=mixed_batch,
            base_ms=mixed_base_ms,
            per_token_ms=per_token_ms,
            overlap=overlap,
            duration_s=mixed_duration_s,
            util_of=util_of,
            pin_short=pin_short,
        )
        out["mixed"] = _stack_mixed(workdir, params, progress)
    write_json(json_path, out)


def _stack_scaling(
    workdir: Path,
    counts: list[int],
    *,
    base_ms: float,
    max_batch: int,
    duration_s: float,
    gateway_workers: int,
    progress: bool,
) -> dict[str, Any]:
    """Benchmark 1 on ``counts`` workers, run and printed."""
    from sluicebench.loadgen.stack_bench import run_scaling
    from sluicebench.loadgen.stack_report import print_scaling

    res = run_scaling(
        workdir,
        workers=counts,
        base_ms=base_ms,
        max_batch=max_batch,
        duration_s=duration_s,
        progress=progress,
        gateway_workers=gateway_workers,
    )
    print_scaling(res, _console())
    return res


def _stack_mixed(workdir: Path, params: MixedParams, progress: bool) -> dict[str, Any]:
    """Benchmark 2, run and printed."""
    from sluicebench.loadgen.mixed_bench import run_mixed
    from sluicebench.loadgen.stack_report import print_mixed

    res = run_mixed(workdir, params, progress=progress)
    print_mixed(res, _console())
    return res


def _console() -> Any:
    from sluicebench.loadgen.report import console

    return console()
