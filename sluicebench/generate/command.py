"""``sluice bench generate``'s options (registered by sluicebench/cli.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from sluice.cli_common import JsonOpt, fail, write_json

SYSTEMS_HELP = (
    "Comma list of a (sluice continuous), b (sluice whole-batch), c (Ray Serve), "
    "d (vLLM), e (engine in process)."
)


def generate_cmd(
    systems: Annotated[str, typer.Option(help=SYSTEMS_HELP)] = "a,b,c,d,e",
    duration: Annotated[float, typer.Option(help="Closed loop: seconds per system.")] = 20.0,
    warm: Annotated[float, typer.Option(help="Closed loop: seconds left out first.")] = 4.0,
    concurrency: Annotated[int, typer.Option(help="Closed loop: streaming clients.")] = 64,
    open_s: Annotated[float, typer.Option(help="Open loop: seconds of Poisson arrivals.")] = 15.0,
    open_fraction: Annotated[
        float, typer.Option(help="Open loop: rate as a fraction of the first system's capacity.")
    ] = 0.7,
    open_rate: Annotated[
        float | None, typer.Option(help="Open loop: requests/s (instead of the fraction).")
    ] = None,
    model: Annotated[str, typer.Option(help="tiny:<layers>x<width> or an HF directory.")] = (
        "tiny:4x256"
    ),
    slots: Annotated[int, typer.Option(help="Sequences decoded at once, every system.")] = 32,
    requests: Annotated[int, typer.Option(help="Requests in the pool (bounds each loop).")] = 2000,
    seed: Annotated[int, typer.Option(help="Workload and arrival seed.")] = 1,
    mix: Annotated[str, typer.Option(help="max_tokens:weight,...")] = "16:0.5,64:0.3,256:0.2",
    log_dir: Annotated[Path, typer.Option(help="Configs and the systems' logs.")] = Path(
        "bench/results/generate-logs"
    ),
    json_path: JsonOpt = None,
) -> None:
    """Generation: Sluice's continuous slots vs whole batches, Ray Serve @serve.batch,
    vLLM and the engine in process; tokens/s, TTFT, inter-token, CPU (~10 min on 2 busy cores)."""
    from rich.console import Console

    from sluicebench.generate.report import render
    from sluicebench.generate.run import ALL_SYSTEMS, GenParams, run_generate
    from sluicebench.generate.workload import parse_mix

    try:
        max_tokens_mix = parse_mix(mix)
    except ValueError as e:
        fail(f"--mix: {e}", 2)
    chosen = tuple(s.strip() for s in systems.split(",") if s.strip())
    if not chosen or set(chosen) - set(ALL_SYSTEMS):
        fail(f"--systems: choose from {', '.join(ALL_SYSTEMS)}", 2)
    if duration <= warm or concurrency < 1 or slots < 1 or requests < 1:
        fail("--duration must exceed --warm; --concurrency, --slots, --requests above 0", 2)
    params = GenParams(
        model=model,
        systems=chosen,
        slots=slots,
        concurrency=concurrency,
        duration_s=duration,
        warm_s=warm,
        open_s=open_s,
        open_fraction=open_fraction,
        open_rate=open_rate,
        requests=requests,
        seed=seed,
        mix=max_tokens_mix,
    )
    console = Console() if sys.stdout.isatty() else Console(width=170)
    data = run_generate(params, log_dir, progress=console.print)
    render(data, console)
    write_json(json_path, data)
