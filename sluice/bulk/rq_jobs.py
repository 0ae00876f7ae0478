"""RQ's side of bulk jobs: enqueue a coordinator slice, run one, resume lapsed ones.

RQ carries the coarse work (one job per coordinator slice, with RQ's retries,
failure registry and ``rq info``); the per-item hot path stays on Sluice's own
queues. Slice jobs run in ``sluice bulk worker`` processes, which set the
config and Redis client this module's job function uses (:func:`bind`).
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass

import redis
from rq import Queue, Retry, get_current_job
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

from sluice.bulk.coordinator import Coordinator
from sluice.bulk.ops import BulkOps, BulkState, scripts
from sluice.config import SluiceConfig
from sluice.connection import ClientOptions, parse_url, sync_client
from sluice.errors import ConfigError, JobConflict, JobNotFound
from sluice.queue import QueueClient
from sluice.queue.client import connect

log = logging.getLogger("sluice.bulk")
SLICE_RETRIES = 2  # RQ retries a slice that raised (a Redis blip), then the reaper resumes
MAX_RESUMES = 5  # resumed this often without progress: the bulk job fails, saying why
WAITING = (JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED)


@dataclass
class _Bound:
    cfg: SluiceConfig
    client: QueueClient


_BOUND: _Bound | None = None


def bind(cfg: SluiceConfig, client: QueueClient) -> None:
    """What slice jobs in this process (and its forked work horses) run with."""
    global _BOUND
    client.register(scripts())
    _BOUND = _Bound(cfg, client)


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
    return Queue(cfg.bulk.rq_queue, connection=conn)


def enqueue_slice(cfg: SluiceConfig, client: QueueClient, conn: redis.Redis, bulk_id: str) -> str:
    """Queue the bulk job's next slice; the bulk job names it first, so only this
    slice may take the lease (an older queued one finds itself superseded)."""
    ops = BulkOps(list(cfg.models), cfg.bulk.ttl_s)
    job_id = f"sluice-bulk-{secrets.token_hex(8)}"
    client.run(ops.set_fields(bulk_id, rq_job=job_id))
    rq_queue(cfg, conn).enqueue(
        run_slice,
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


def run_slice(bulk_id: str) -> str:
    """The RQ job: coordinate ``bulk_id`` for one slice, then queue the next."""
    if _BOUND is None:
        raise RuntimeError("sluice.bulk.rq_jobs.bind() was not called: run `sluice bulk worker`")
    job = get_current_job()
    slice_id = job.id if job is not None else ""
    coordinator = Coordinator(_BOUND.client, _BOUND.cfg, bulk_id, slice_id=slice_id)
    outcome = coordinator.run_slice()
    if outcome == "slice" and job is not None:
        enqueue_slice(_BOUND.cfg, _BOUND.client, job.connection, bulk_id)
    log.info("bulk %s: slice %s ended: %s", bulk_id, slice_id, outcome)
    return outcome


def _slice_waiting(conn: redis.Redis, job_id: str | None) -> bool:
    if not job_id:
        return False
    try:
        return Job.fetch(job_id, connection=conn).get_status(refresh=True) in WAITING
    except NoSuchJobError:
        return False


def reap(cfg: SluiceConfig, client: QueueClient, conn: redis.Redis) -> list[str]:
    """Resume every bulk job whose coordinator lease lapsed (its worker died, hung or
    its slice failed past its retries); returns the ids resumed."""
    ops = BulkOps(list(cfg.models), cfg.bulk.ttl_s)
    now_ms = int(time.time() * 1000)
    grace_ms = int(cfg.bulk.lease_s * 1000)
    resumed = []
    for model in cfg.models:
        for bulk_id in client.run(ops.lapsed(model, now_ms)):
            if _resume(cfg, client, conn, ops, bulk_id, now_ms + grace_ms):
                resumed.append(bulk_id)
    return resumed


def _resume(
    cfg: SluiceConfig,
    client: QueueClient,
    conn: redis.Redis,
    ops: BulkOps,
    bulk_id: str,
    next_check_ms: int,
) -> bool:
    model = ops.model_of(bulk_id)
    try:
        bulk = client.run(ops.get(bulk_id))
    except JobNotFound:  # expired: nothing to resume
        client.run(ops.forget(model, bulk_id))
        return False
    if bulk.ended:
        client.run(ops.forget(model, bulk_id))
        return False
    # Checked again only after another lease's time, whatever happens next.
    client.run(ops.touch_active(model, bulk_id, next_check_ms))
    if _slice_waiting(conn, bulk.rq_job):
        return False  # its slice is queued behind other bulk jobs' slices: it will run
    if bulk.resumes >= MAX_RESUMES:
        _give_up(client, ops, bulk)
        return False
    client.run(ops.set_fields(bulk_id, resumes=bulk.resumes + 1))
    log.warning(
        "bulk %s: coordinator lease lapsed (slice %s); resuming from line %d",
        bulk_id,
        bulk.rq_job,
        bulk.cursor + 1,
    )
    enqueue_slice(cfg, client, conn, bulk_id)
    return True


def _give_up(client: QueueClient, ops: BulkOps, bulk: BulkState) -> None:
    message = (
        f"resumed {bulk.resumes} times without progress; the RQ failed job registry "
        f"holds the slices' errors (last slice {bulk.rq_job})"
    )
    error = {"type": "coordinator_failed", "message": message}
    for job_id in client.run(ops.pending(bulk.id)).values():
        try:
            client.cancel(job_id)
        except (JobNotFound, JobConflict):
            pass  # ended or expired already
    status, _ = client.run(ops.force_fail(bulk.id, error))
    log.error("bulk %s: failed: %s (%s)", bulk.id, error["message"], status)
