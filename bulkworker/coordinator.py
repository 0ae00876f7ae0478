"""One bulk job's coordinator: feed a bounded window, gather outcomes, checkpoint.

:meth:`Coordinator.run_slice` is what one RQ job runs: it takes the bulk job's
lease, then polls every ``bulk.poll_s`` until the bulk job ends, the lease is
lost, or ``bulk.slice_s`` has passed (the caller then queues the next slice).
Every write is a script that checks the lease, so a coordinator that was
paused and lost its lease changes nothing (ADR 0090).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from bulkworker.feeder import build_chunk, outcome_line
from sluice import keys
from sluice.bulk.ops import BulkOps, BulkState, scripts
from sluice.config import SluiceConfig
from sluice.cost import CostEstimator
from sluice.errors import (
    JobConflict,
    JobNotFound,
    LeaseLost,
    ModelPaused,
    QueueFull,
    RateLimited,
)
from sluice.jobs import JobRecord, JobStatus, NewJob
from sluice.queue import QueueClient
from sluice.queue.scripts import Call
from sluice.records import JobField as J

log = logging.getLogger("sluice.bulk")
JOB_FIELDS = (J.STATUS, J.RESULT, J.ERROR, J.COST, J.META, J.BUCKET)
RATE_WINDOW_S = 30.0


@dataclass(frozen=True, slots=True)
class Pending:
    """The lines fed and not yet gathered, as their jobs are now."""

    ids: dict[int, str]  # line index -> job id, as read
    ended: list[tuple[int, str, str, bool]]  # index, job id, output line, succeeded
    missing: list[int]  # checkpointed, but the job is not there: submit again
    queued: int
    queued_cost: int
    running_cost: int


class Coordinator:
    """Runs slices of one bulk job; ``clock``/``sleep`` are injectable for tests."""

    def __init__(
        self,
        client: QueueClient,
        cfg: SluiceConfig,
        bulk_id: str,
        *,
        slice_id: str = "",
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        client.register(scripts())
        self.client, self.cfg, self.bulk_id = client, cfg, bulk_id
        self.ops = BulkOps(list(cfg.models), cfg.bulk.ttl_s)
        self.model = self.ops.model_of(bulk_id)
        self.mcfg = cfg.models[self.model]
        self.estimator = CostEstimator(self.mcfg)
        self.token = secrets.token_hex(8)
        self.slice_id = slice_id  # the RQ job running this slice ('' outside RQ)
        self.clock, self.sleep = clock, sleep
        self.lease_ms = int(cfg.bulk.lease_s * 1000)
        self.rates: deque[tuple[float, int]] = deque()

    def run_slice(self) -> str:
        """``finished`` | ``slice`` (more to do) | ``held`` | ``lost`` | ``ended`` |
        ``missing`` | ``superseded``."""
        status = self._take()
        if status != "ok":
            return status
        deadline = self.clock() + self.cfg.bulk.slice_s
        while True:
            outcome = self.step()
            if outcome != "more":
                return outcome
            if self.clock() >= deadline:
                self.client.run(self.ops.lease(self.bulk_id, self.token, self.lease_ms, "release"))
                return "slice"
            self.sleep(self.cfg.bulk.poll_s)

    def _take(self) -> str:
        """The lease; a slice the bulk job names waits out a dead coordinator's lease
        (RQ's retry of a killed slice lands here) instead of leaving it to the reaper."""
        give_up = self.clock() + self.cfg.bulk.lease_s + 2 * self.cfg.bulk.poll_s
        while True:
            status, _ = self.client.run(
                self.ops.lease(self.bulk_id, self.token, self.lease_ms, "take", self.slice_id)
            )
            if status != "held" or self.clock() >= give_up:
                return status
            self.sleep(self.cfg.bulk.poll_s)

    def step(self) -> str:
        """One poll: ``more``, ``finished`` or ``lost``."""
        status, state = self.client.run(
            self.ops.lease(self.bulk_id, self.token, self.lease_ms, "renew")
        )
        if status == "ended":
            return "finished"
        if status != "ok":
            return "lost"
        if state == "cancelling":
            return self._cancel()
        pending = self._read_pending()
        if pending.ended:
            if self.client.run(self.ops.gather(self.bulk_id, self.token, pending.ended)) is None:
                return "lost"
        if pending.missing:
            self._submit_lines(pending.missing)
        bulk = self.client.run(self.ops.get(self.bulk_id))
        if pending.ended and bulk.resumes:
            self.client.run(self.ops.set_fields(self.bulk_id, resumes=0))  # progress made
        left = len(pending.ids) - len(pending.ended)  # gathered: no longer pending
        if bulk.cursor >= bulk.total and left == 0:
            return self._finish("completed")
        queued = pending.queued + len(pending.missing)  # those were just submitted again
        room = min(self.mcfg.bulk_max_queued - queued, self.cfg.bulk.feed_chunk)
        fed, lines = 0, 0
        if bulk.cursor < bulk.total and room > 0:
            lines = min(room, bulk.total - bulk.cursor)
            fed = self._feed(bulk.cursor, lines)
            if fed < 0:
                return "lost"
        self._report(bulk, pending, queued + fed, bulk.cursor + (lines if fed else 0))
        return "more"

    # -- reading ------------------------------------------------------------
    def _read_pending(self) -> Pending:
        ids = self.client.run(self.ops.pending(self.bulk_id))
        order = sorted(ids)
        cmds = [("HMGET", keys.job_key(self.model, ids[i]), *JOB_FIELDS) for i in order]
        rows = self.client.run(Call(list, commands=cmds)) if cmds else []
        ended, missing, queued, queued_cost, running_cost = [], [], 0, 0, 0
        for index, row in zip(order, rows, strict=True):
            if row[0] is None:
                missing.append(index)
                continue
            rec = JobRecord.from_hash(self.model, dict(zip(JOB_FIELDS, row, strict=True)))
            if rec.status is JobStatus.QUEUED:
                queued, queued_cost = queued + 1, queued_cost + rec.cost
            elif rec.status is JobStatus.RUNNING:
                running_cost += rec.cost
            else:
                line, ok = outcome_line(index, rec)
                ended.append((index, ids[index], line, ok))
        return Pending(ids, ended, missing, queued, queued_cost, running_cost)

    # -- feeding --------------------------------------------------------------
    def _feed(self, cursor: int, n: int) -> int:
        """Checkpoint and submit lines cursor..cursor+n-1; the jobs queued, -1 if the
        lease is lost (or the input is gone, which ends the bulk job as failed)."""
        lines = self.client.run(self.ops.input_lines(self.bulk_id, cursor, cursor + n))
        if len(lines) != n:  # the input expired or was removed: nothing left to run
            why = f"the input has {len(lines)} lines from line {cursor + 1}, {n} expected"
            self._finish("failed", {"type": "input_missing", "message": why})
            return -1
        chunk = build_chunk(self.bulk_id, cursor, lines, self.estimator)
        pairs = [(i, j.id) for i, j in zip(chunk.indexes, chunk.jobs, strict=True)]
        reply = self.client.run(
            self.ops.feed(
                self.bulk_id, self.token, cursor, cursor + n, pairs, chunk.failed, chunk.cost
            )
        )
        if reply != "ok":
            return -1 if reply == "lost" else 0
        if not self._submit(chunk.jobs):
            return -1
        return len(chunk.jobs)

    def _submit_lines(self, indexes: list[int]) -> None:
        """Lines checkpointed whose jobs are not there (a crash between the checkpoint
        and the submit, or a submit refused for a full queue): the same ids again."""
        for start, stop in _runs(indexes):  # every line of a run is a missing one
            lines = self.client.run(self.ops.input_lines(self.bulk_id, start, stop))
            if not self._submit(build_chunk(self.bulk_id, start, lines, self.estimator).jobs):
                return  # the next lease renewal says lost

    def _submit(self, jobs: list[NewJob]) -> bool:
        """Submit, fenced on this coordinator's lease; False once the lease is lost.

        The fence matters for a coordinator paused between its checkpoint and this
        call: meanwhile another took the lease, submitted the same ids, ran them and
        gathered them (deleting their hashes). Unfenced, the late submit would
        recreate those jobs and run them a second time.
        """
        if not jobs:
            return True
        q, f = self.mcfg.queue, self.cfg.gateway.shed_fraction["low"]
        try:
            self.client.submit(
                self.model,
                jobs,
                max_jobs=max(1, int(q.max_queued_jobs * f)),
                max_cost=max(1, int(q.max_queued_cost * f)),
                fence=(keys.bulk_key(self.model, self.bulk_id), self.token),
            )
        except (QueueFull, RateLimited, ModelPaused) as e:
            # Interactive traffic has the room (or the model is paused, refusing new
            # jobs): these lines stay checkpointed and are submitted again on a later poll.
            log.info("bulk %s: queue full (%s); retrying on the next poll", self.bulk_id, e)
        except LeaseLost:
            log.warning("bulk %s: lease lost before its jobs were submitted", self.bulk_id)
            return False
        return True

    # -- ending and reporting -------------------------------------------------------
    def _cancel(self) -> str:
        """Keep what has ended (its output is real), cancel the rest, end the bulk job."""
        pending = self._read_pending()
        if pending.ended:
            if self.client.run(self.ops.gather(self.bulk_id, self.token, pending.ended)) is None:
                return "lost"
        gathered = {index for index, *_ in pending.ended}
        for index, job_id in pending.ids.items():
            if index in gathered:
                continue
            try:
                self.client.cancel(job_id)
            except (JobNotFound, JobConflict):  # ended or gone already: nothing to cancel
                log.debug("bulk %s: line %d had ended", self.bulk_id, index + 1)
        return self._finish("cancelled")

    def _finish(self, state: str, error: dict[str, str] | None = None) -> str:
        status, _ = self.client.run(self.ops.finish(self.bulk_id, self.token, state, error))
        log.info("bulk %s: %s (%s)", self.bulk_id, state, status)
        return "finished" if status in ("ok", "refused") else "lost"

    def _report(self, bulk: BulkState, p: Pending, queued: int, cursor: int) -> None:
        """The autoscaler's bulk signal and the rate shown to clients."""
        now = self.clock()
        self.rates.append((now, bulk.done))
        while self.rates and self.rates[0][0] < now - RATE_WINDOW_S:
            self.rates.popleft()
        t0, d0 = self.rates[0]
        rate = (bulk.done - d0) / (now - t0) if now - t0 >= 1.0 else 0.0
        # Lines not fed yet are not estimated: assume the mean of those fed so far.
        avg = bulk.fed_cost / bulk.fed_jobs if bulk.fed_jobs else float(self.mcfg.buckets[0])
        unfed_cost = int((bulk.total - cursor) * avg)
        # Jobs fed this poll count as queued at the mean cost (they were not read back).
        queued_cost = p.queued_cost + int((queued - p.queued) * avg)
        report = {
            "queued": queued,
            "queued_cost": queued_cost,
            "backlog_cost": queued_cost + p.running_cost + unfed_cost,
            "at_ms": int(time.time() * 1000),
        }
        self.client.run(self.ops.report(self.bulk_id, report, round(rate, 3)))


def _runs(indexes: list[int]) -> list[tuple[int, int]]:
    """Sorted indexes as [start, stop) runs of consecutive lines."""
    out: list[tuple[int, int]] = []
    for i in sorted(indexes):
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out
