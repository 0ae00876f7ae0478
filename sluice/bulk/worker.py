"""``sluice bulk worker``: an RQ worker for coordinator slices, plus the reaper.

RQ's own Worker runs the slices (a forked work horse each, RQ's warm shutdown on
SIGTERM: the slice in hand finishes, at most ``bulk.slice_s``). A daemon thread
resumes bulk jobs whose coordinator lease lapsed, every third of a lease.
"""

from __future__ import annotations

import logging
import threading

import redis
from rq import Worker

from sluice.backoff import Reconnect
from sluice.bulk.ops import scripts
from sluice.bulk.rq_jobs import bind, reap, rq_connection, rq_queue
from sluice.config import SluiceConfig
from sluice.errors import RedisUnavailable
from sluice.queue import QueueClient
from sluice.queue.client import REDIS_ERRORS, connect

log = logging.getLogger("sluice.bulk")


def reaper_loop(cfg: SluiceConfig, url: str, stop: threading.Event) -> None:
    """Resume lapsed bulk jobs until ``stop``; an outage is logged once (ADR 0065)."""
    client = QueueClient(connect(url), dict(cfg.models))
    conn = rq_connection(cfg, url, read_timeout_s=5.0)
    client.register(scripts())
    outage = Reconnect(log, "bulk reaper")
    period_s = max(0.2, cfg.bulk.lease_s / 3)
    while not stop.wait(period_s):
        try:
            resumed = reap(cfg, client, conn)
        except (RedisUnavailable, redis.RedisError, *REDIS_ERRORS) as e:
            outage.failed(str(e))
            continue
        outage.ok()
        if resumed:
            log.info("reaper: resumed %s", ", ".join(resumed))


def run_worker(cfg: SluiceConfig, url: str, *, burst: bool = False) -> bool:
    """Work RQ's bulk queue until SIGTERM (or, with ``burst``, until it is empty)."""
    client = QueueClient(connect(url), dict(cfg.models))
    bind(cfg, client)
    # No read timeout: RQ blocks on its queue for minutes between jobs (BLPOP).
    conn = rq_connection(cfg, url, read_timeout_s=None)
    stop = threading.Event()
    reaper = threading.Thread(
        target=reaper_loop, args=(cfg, url, stop), name="bulk-reaper", daemon=True
    )
    reaper.start()
    worker = Worker([rq_queue(cfg, conn)], connection=conn)
    try:
        return bool(worker.work(burst=burst, logging_level="INFO", with_scheduler=False))
    finally:
        stop.set()
