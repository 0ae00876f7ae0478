"""Queueing bulk coordinator slices on RQ: what the gateway (a bulk job's first
slice) and the bulk worker (every later one) share.

RQ carries the coarse work (one job per coordinator slice, with RQ's retries,
failure registry and ``rq info``); the per-item hot path stays on Sluice's own
queues. A slice is queued by the dotted path of its job function
(:data:`SLICE_JOB`), so a process that queues one never imports the bulk
worker's package, which runs it (``bulkworker.jobs``, ``sluice bulk worker``).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

import redis

from sluice.bulk.ops import BulkOps, scripts
from sluice.config import SluiceConfig
from sluice.connection import ClientOptions, parse_url, sync_client
from sluice.errors import ConfigError
from sluice.queue import QueueClient
from sluice.queue.client import connect

if TYPE_CHECKING:
    from rq import Queue

SLICE_RETRIES = 2  # RQ retries a slice that raised (a Redis blip), then the reaper resumes
# The RQ job function a slice runs, by name: RQ imports it in the bulk worker.
SLICE_JOB = "bulkworker.jobs.run_slice"


def rq_url(cfg: SluiceConfig, url: str) -> str:
    """Where RQ keeps its queues: ``bulk.redis_url``, else Sluice's own Redis.

    RQ needs one Redis (its job scripts span keys a cluster would spread over
    slots): a plain server, a managed primary endpoint or a Sentinel service.
    """
    chosen = cfg.bulk.redis_url or url
    if parse_url(chosen).kind == "cluster":
        raise ConfigError(
            "bulk jobs run on RQ, which needs one Redis server, not a cluster: set "
            "bulk.redis_url to a plain or Sentinel Redis (docs/deploy.md)"
        )
    return chosen


def rq_connection(cfg: SluiceConfig, url: str, read_timeout_s: float | None) -> redis.Redis:
    """A client for RQ (raw replies: RQ decodes its own), on :func:`rq_url`."""
    opts = ClientOptions(timeout_s=5.0, read_timeout_s=read_timeout_s, decode=False)
    return sync_client(rq_url(cfg, url), opts)


def rq_queue(cfg: SluiceConfig, conn: redis.Redis) -> Queue:
    from rq import Queue  # here: a gateway imports RQ with its first bulk job, not at start

    return Queue(cfg.bulk.rq_queue, connection=conn)


def enqueue_slice(cfg: SluiceConfig, client: QueueClient, conn: redis.Redis, bulk_id: str) -> str:
    """Queue the bulk job's next slice; the bulk job names it first, so only this
    slice may take the lease (an older queued one finds itself superseded)."""
    from rq import Retry

    ops = BulkOps(list(cfg.models), cfg.bulk.ttl_s)
    job_id = f"sluice-bulk-{secrets.token_hex(8)}"
    client.run(ops.set_fields(bulk_id, rq_job=job_id))
    rq_queue(cfg, conn).enqueue(
        SLICE_JOB,
        bulk_id,
        job_id=job_id,
        job_timeout=int(cfg.bulk.slice_s * 2 + 60),
        retry=Retry(max=SLICE_RETRIES),
        result_ttl=600,
        failure_ttl=7 * 86400,
        description=f"sluice bulk coordinator {bulk_id}",
    )
    return job_id


class RqEnqueuer:
    """Queues first slices from a process without RQ workers (the gateway), on sync
    clients of its own made on first use: RQ needs raw (undecoded) replies."""

    def __init__(self, cfg: SluiceConfig, url: str) -> None:
        self.cfg, self.url = cfg, url
        self._clients: tuple[QueueClient, redis.Redis] | None = None

    def __call__(self, bulk_id: str) -> str:
        if self._clients is None:
            timeout = self.cfg.gateway.redis_timeout_s
            self._clients = (
                QueueClient(connect(self.url, timeout), dict(self.cfg.models)),
                rq_connection(self.cfg, self.url, timeout),
            )
            self._clients[0].register(scripts())
        client, conn = self._clients
        return enqueue_slice(self.cfg, client, conn, bulk_id)
