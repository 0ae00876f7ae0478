"""The RQ jobs of bulk jobs: run one coordinator slice, resume lapsed ones.

Slice jobs run in ``sluice bulk worker`` processes, which set the config and
Redis client this module's job function uses (:func:`bind`); they are queued by
:func:`sluice.bulk.rq_jobs.enqueue_slice`, which names :func:`run_slice` by its
dotted path.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import redis
from rq import get_current_job
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

from bulkworker.coordinator import Coordinator
from sluice.bulk.ops import BulkOps, BulkState, scripts
from sluice.bulk.rq_jobs import enqueue_slice
from sluice.config import SluiceConfig
from sluice.errors import JobConflict, JobNotFound
from sluice.queue import QueueClient

log = logging.getLogger("sluice.bulk")
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


def run_slice(bulk_id: str) -> str:
    """The RQ job: coordinate ``bulk_id`` for one slice, then queue the next."""
    if _BOUND is None:
        raise RuntimeError("bulkworker.jobs.bind() was not called: run `sluice bulk worker`")
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
