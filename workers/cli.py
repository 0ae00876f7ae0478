"""``sluice worker``; heavy imports happen inside the command."""

from __future__ import annotations

from typing import Annotated

import typer

from sluice.cli_common import (
    ConfigOpt,
    RedisUrlOpt,
    check_redis,
    check_setting,
    fail,
    load_required,
)
from sluice.cli_common import redis_url as resolve_url
from sluice.errors import ConfigError


def worker_cmd(
    model: Annotated[str, typer.Option("--model", "-m", help="Model name from the config.")],
    config: ConfigOpt = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    buckets: Annotated[
        str | None, typer.Option(help="Serve only these buckets, e.g. 32,128.")
    ] = None,
    redis_url: RedisUrlOpt = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="Prometheus port (0 = a free one, -1 = none).")
    ] = None,
    worker_id: Annotated[
        str | None, typer.Option(help="Worker id; default host-pid-random.")
    ] = None,
    overlap: Annotated[
        bool | None, typer.Option("--overlap/--no-overlap", help="Prefetch the next batch.")
    ] = None,
    burst: Annotated[bool, typer.Option(help="Exit 0 once the queue is empty.")] = False,
    parked: Annotated[
        bool, typer.Option(help="Warm pool: load, then park (standby) until promoted.")
    ] = False,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "INFO",
) -> None:
    """Run one worker process: pull batches of MODEL's jobs (a generative model: decode
    them in slots, claiming into each slot as it frees) until drained (SIGTERM)."""
    from workers.startpath import StartPath, process_age_s

    start = StartPath()
    start.add("process", process_age_s())  # interpreter and CLI imports, before this line
    from workers.main import build_worker, parse_buckets, setup_logging, wait_for_redis
    from workers.worker import WorkerOptions

    cfg = load_required(config)
    url = resolve_url(redis_url, cfg)
    setup_logging(log_level)
    check_setting(url, cfg)  # one that can never work: exit 2, not a wait
    try:
        wait_for_redis(url)  # an outage is waited out, not turned into a restart loop
    except Exception:  # noqa: BLE001 - a setting that can never work: say why, exit 3
        check_redis(url)
    opts = WorkerOptions(
        model=model,
        buckets=parse_buckets(buckets),
        worker_id=worker_id,
        overlap=overlap,
        metrics_port=metrics_port,
        burst=burst,
        parked=parked,
        start_path=start,
    )
    try:
        with start.timed("imports"):  # the handler's module (torch, a model library)
            worker = build_worker(cfg, url, opts, device)
    except ConfigError as e:
        fail(str(e), 2)
    raise typer.Exit(worker.run())


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("worker")(worker_cmd)
