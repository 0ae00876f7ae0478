"""``sluice gateway`` and ``sluice bench gateway``."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from sluice.cli_common import ConfigOpt, JsonOpt, RedisUrlOpt, load_required, redis_url
from sluice.config import CONFIG_ENV, REDIS_URL_ENV


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("gateway")(gateway_cmd)
    bench_app.command("gateway")(bench_cmd)
    bench_app.command("gateway-stall")(bench_stall_cmd)


def gateway_cmd(
    config: ConfigOpt = None,
    host: Annotated[str | None, typer.Option(help="Bind address (default: the file's).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: the file's).")] = None,
    workers: Annotated[int, typer.Option(min=1, help="uvicorn worker processes.")] = 1,
    redis_url_opt: RedisUrlOpt = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
) -> None:
    """Run the REST gateway (FastAPI under uvicorn, uvloop + httptools)."""
    import uvicorn

    cfg = load_required(config)
    assert config is not None
    # Worker processes rebuild the app from the environment (uvicorn's factory).
    os.environ[CONFIG_ENV] = str(config.resolve())
    os.environ[REDIS_URL_ENV] = redis_url(redis_url_opt, cfg)
    uvicorn.run(
        "gateway.app:app_from_env", factory=True,
        host=host or cfg.gateway.host, port=port or cfg.gateway.port, workers=workers,
        loop="uvloop", http="httptools", log_level=log_level, access_log=False,
        timeout_graceful_shutdown=5,
    )  # fmt: skip


def bench_cmd(
    rates: Annotated[str, typer.Option(help="Comma-separated offered rates (req/s).")] = "500,1000",
    duration_s: Annotated[float, typer.Option(help="Seconds per measured run.")] = 5.0,
    processes: Annotated[str, typer.Option(help="uvicorn process counts to compare.")] = "1,2",
    longpoll_rate: Annotated[float, typer.Option(help="Jobs/s in the long-poll test.")] = 500.0,
    json_path: JsonOpt = None,
) -> None:
    """Gateway submit throughput and latency vs a bare FastAPI+Redis endpoint; long-poll wake-up."""
    from gateway.bench import main

    main(
        rates=[float(r) for r in rates.split(",") if r],
        duration_s=duration_s,
        processes=[int(p) for p in processes.split(",") if p],
        longpoll_rate=longpoll_rate,
        json_path=json_path,
    )


def bench_stall_cmd(json_path: JsonOpt = None) -> None:
    """Longest event-loop gap while a large input is estimated: inline, thread, now."""
    from gateway.bench_stall import main

    main(json_path=json_path)
