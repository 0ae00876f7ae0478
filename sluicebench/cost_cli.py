"""``sluice bench cost``: the command line of sluicebench/cost_bench.py (imported
only when the command runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sluice.cli_common import JsonOpt, fail
from sluice.errors import SluiceError


def cost_cmd(
    routes: Annotated[
        str, typer.Option(help="Comma-separated: submit_poll, predict, embeddings, batch.")
    ] = "submit_poll,predict,embeddings,batch",
    batch_sizes: Annotated[str, typer.Option(help="The worker's claim sizes.")] = "1,32",
    seconds: Annotated[float, typer.Option(help="Seconds measured per route.")] = 5.0,
    concurrency: Annotated[int, typer.Option(help="Clients of the closed loop.")] = 64,
    profile_seconds: Annotated[
        float, typer.Option(help="Seconds profiled per route (0: no profile).")
    ] = 3.0,
    other: Annotated[
        Path | None, typer.Option(help="Another checkout, measured side by side (ABBA).")
    ] = None,
    idle_seconds: Annotated[
        float, typer.Option(help="Seconds of no load measured first (subtracted).")
    ] = 3.0,
    slices: Annotated[
        int,
        typer.Option(
            help="Stretches each route's seconds are cut into, the routes taken in turn "
            "(A, B, A, B, ...) so that a drifting load falls on every route alike."
        ),
    ] = 4,
    json_path: JsonOpt = None,
) -> None:
    """What a job costs per route: gateway and Redis CPU, commands, round trips, profile."""
    from sluicebench.cost_bench import main

    if other is not None and not (other / "sluice" / "queue").is_dir():
        fail(f"{other}: not a Sluice checkout", 2)
    try:
        main(
            routes,
            batch_sizes,
            seconds,
            concurrency,
            profile_seconds,
            other,
            json_path,
            idle_seconds=idle_seconds,
            slices=slices,
        )
    except SluiceError as e:
        fail(str(e))
