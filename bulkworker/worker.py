"""``sluice bulk worker``: an RQ worker for coordinator slices, plus the reaper.

RQ's own Worker runs the slices (a forked work horse each, RQ's warm shutdown on
SIGTERM: the slice in hand finishes, at most ``bulk.slice_s``). A daemon thread
resumes bulk jobs whose coordinator lease lapsed, every third of a lease.

Metrics (``bulk.metrics_port``) are counted in this process, never in a work
horse: a forked horse's counters would die with it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis
from rq import Worker

from bulkworker.jobs import bind, reap
from bulkworker.metrics import BulkWorkerMetrics
from sluice.backoff import Reconnect
from sluice.bulk.ops import scripts
from sluice.bulk.rq_jobs import rq_connection, rq_queue
from sluice.config import SluiceConfig
from sluice.errors import RedisUnavailable
from sluice.jobs import model_of
from sluice.queue import QueueClient
from sluice.queue.client import REDIS_ERRORS, connect

log = logging.getLogger("sluice.bulk")


class MeteredWorker(Worker):
    """RQ's Worker, counting each slice in the parent once its work horse exits."""

    metrics: BulkWorkerMetrics

    def execute_job(self, job: Any, queue: Any) -> None:
        started = time.monotonic()
        try:
            super().execute_job(job, queue)
        finally:
            self.metrics.slice_seconds.observe(time.monotonic() - started)
            self.metrics.slices.labels(_status(job)).inc()


def _status(job: Any) -> str:
    try:
        status = job.get_status(refresh=True)
    except Exception:  # noqa: BLE001 - gone, or Redis unreachable: counted, not raised
        return "unknown"
    return str(getattr(status, "value", status) or "unknown")


def reaper_loop(
    cfg: SluiceConfig, url: str, stop: threading.Event, metrics: BulkWorkerMetrics
) -> None:
    """Resume lapsed bulk jobs until ``stop``; an outage is logged once (ADR 0065)."""
    client = QueueClient(connect(url), dict(cfg.models))
    conn = rq_connection(cfg, url, read_timeout_s=5.0)
    client.register(scripts())
    outage = Reconnect(log, "bulk reaper")
    period_s = max(0.2, cfg.bulk.lease_s / 3)
    queue = rq_queue(cfg, conn)
    while not stop.wait(period_s):
        try:
            resumed = reap(cfg, client, conn)
            metrics.rq_queued.set(queue.count)
        except (RedisUnavailable, redis.RedisError, *REDIS_ERRORS) as e:
            metrics.reaper_failures.inc()
            outage.failed(str(e))
            continue
        outage.ok()
        for bulk_id in resumed:
            metrics.resumed.labels(model_of(bulk_id) or "").inc()
        if resumed:
            log.info("reaper: resumed %s", ", ".join(resumed))


def run_worker(
    cfg: SluiceConfig,
    url: str,
    *,
    burst: bool = False,
    metrics: BulkWorkerMetrics | None = None,
) -> bool:
    """Work RQ's bulk queue until SIGTERM (or, with ``burst``, until it is empty)."""
    metrics = metrics or BulkWorkerMetrics()
    client = QueueClient(connect(url), dict(cfg.models))
    bind(cfg, client)
    # No read timeout: RQ blocks on its queue for minutes between jobs (BLPOP).
    conn = rq_connection(cfg, url, read_timeout_s=None)
    stop = threading.Event()
    reaper = threading.Thread(
        target=reaper_loop, args=(cfg, url, stop, metrics), name="bulk-reaper", daemon=True
    )
    reaper.start()
    worker = MeteredWorker([rq_queue(cfg, conn)], connection=conn)
    worker.metrics = metrics
    try:
        return bool(worker.work(burst=burst, logging_level="INFO", with_scheduler=False))
    finally:
        stop.set()
