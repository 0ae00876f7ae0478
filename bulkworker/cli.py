"""``sluice bulk worker``: added to the core's ``sluice bulk`` group (whose other
commands are a client's: submit, status, output, cancel)."""

from __future__ import annotations

from typing import Annotated

import typer

from sluice.cli_common import (
    EXIT_CONFIG,
    ConfigOpt,
    MetricsPortOpt,
    RedisUrlOpt,
    check_redis,
    fail,
    load_required,
)
from sluice.cli_common import redis_url as resolve_url


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    from sluice.bulk.cli import bulk_app

    bulk_app.command("worker")(worker_cmd)


def worker_cmd(
    config: ConfigOpt = None,
    redis_url_opt: RedisUrlOpt = None,
    burst: Annotated[bool, typer.Option(help="Exit once RQ's bulk queue is empty.")] = False,
    metrics_port: MetricsPortOpt = None,
) -> None:
    """An RQ worker for bulk coordinators (and the reaper that resumes lapsed ones)."""
    import logging

    from bulkworker.metrics import BulkWorkerMetrics
    from bulkworker.worker import run_worker
    from sluice.bulk.rq_jobs import rq_url
    from sluice.errors import ConfigError

    cfg = load_required(config)
    url = resolve_url(redis_url_opt, cfg)
    check_redis(url, cfg)
    try:
        queues_url = rq_url(cfg, url)
    except ConfigError as e:
        fail(str(e), EXIT_CONFIG)
    if queues_url != url:
        check_redis(queues_url)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    metrics = BulkWorkerMetrics()
    port = cfg.bulk.metrics_port if metrics_port is None else metrics_port
    if port:
        try:
            bound = metrics.serve(port)
        except OSError as e:  # the port is taken
            fail(f"bulk worker: metrics port {port}: {e.strerror or e}")
        logging.getLogger("sluice.bulk").info("bulk worker: metrics on :%d/metrics", bound)
    run_worker(cfg, url, burst=burst, metrics=metrics)
