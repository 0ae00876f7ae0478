"""The slot loop: one engine step, then one round trip to Redis, per turn (ADR 0147).

One turn:

1. ``engine.step()`` for the sequences in slots (skipped while the last turn's
   tokens are still undelivered, so a Redis outage holds decoding, not tokens);
2. the step's news: one ``Append`` per active sequence (its new tokens; its first
   says the run started) and a ``Finished`` for each that ended;
3. ``run_step``: ONE pipelined round trip that stores the tokens, renews the
   leases, completes the ended jobs and claims up to the free slots;
4. abort every job the reply says is lost (cancelled, or its lease lapsed): its
   slot is free from the next step;
5. admit the claimed jobs into the engine; one that cannot run (malformed input,
   prompt + max_tokens above a slot) becomes a ``Finished`` with the reason, sent
   on the next turn.

Admission ``continuous`` claims into the free slots every turn; ``whole_batch``
(the benchmark's baseline) claims only once every slot is empty. The caller
(``workers.generate.worker``) drives turns, waits on the queue's wake list when a
turn finds nothing to do, and drains or parks between turns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from sluice.config import GenerateConfig
from sluice.errors import RedisUnavailable
from sluice.generate.ops import Append, Finished, StepReply, run_step
from sluice.jobs import Batch, Outcome
from sluice.queue import QueueClient
from workers.generate.engine import Engine
from workers.generate.metrics import GenerateMetrics
from workers.generate.slots import INVALID_INPUT, SlotTable, StepNews
from workers.outcomes import send_outcomes
from workers.status import WorkerStatus

log = logging.getLogger("sluice.worker")
StepFn = Callable[..., StepReply]


@dataclass
class Turn:
    """What one turn did; ``idle``: nothing in slots, nothing sent, nothing claimed."""

    stepped: bool = False
    sent: bool = False  # tokens or ended jobs delivered
    active: int = 0  # sequences in slots after the turn
    claimed: int = 0
    ended: int = 0
    lost: int = 0
    error: Exception | None = None  # the round trip failed (its news is kept)
    engine_failed: bool = False  # the engine's step raised; its jobs were given back

    @property
    def idle(self) -> bool:
        return not (self.stepped or self.sent or self.active or self.claimed or self.error)


@dataclass
class _Outbox:
    """A turn's news not yet delivered (kept through a failed round trip)."""

    appends: list[Append] = field(default_factory=list)
    finished: list[Finished] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.appends or self.finished)


class SlotLoop:
    """One worker's slots over one engine; ``turn`` runs one step and round trip."""

    def __init__(
        self,
        engine: Engine,
        client: QueueClient,
        model: str,
        worker_id: str,
        gcfg: GenerateConfig,
        *,
        buckets: list[str] | None = None,
        metrics: GenerateMetrics | None = None,
        status: WorkerStatus | None = None,
        step: StepFn = run_step,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine, self.client, self.model, self.worker_id = engine, client, model, worker_id
        self.table = SlotTable(engine)
        self.whole_batch = gcfg.admission == "whole_batch"
        self.claim_kw: dict[str, Any] = {"buckets": buckets} if buckets else {}
        self.metrics, self.status, self._step, self.clock = metrics, status, step, clock
        self.outbox = _Outbox()
        self.retrying = False  # the last round trip failed: deliver before stepping on
        self.tokens_per_s = 0.0

    @property
    def active(self) -> int:
        return self.table.active

    @property
    def busy(self) -> bool:
        """Sequences in slots, or news not yet delivered."""
        return bool(self.table.active or self.outbox)

    def free_slots(self, claim: bool) -> int:
        if not claim:
            return 0
        if self.whole_batch and self.table.active:
            return 0  # the baseline: the next batch waits for this one to end
        return self.table.free

    def turn(self, claim: bool = True) -> Turn:
        """One engine step and one round trip; never raises for Redis or the engine."""
        turn = Turn()
        if not self.retrying and self.table.active:
            news = self._engine_step(turn)
            if news is not None:
                self.outbox.appends.extend(news.appends)
                self.outbox.finished.extend(news.finished)
        # After an engine failure, claim nothing this turn: its retried jobs went back
        # to the head of the queue and would come straight back to this engine.
        free = 0 if turn.engine_failed else self.free_slots(claim)
        if not self.outbox and not free:
            return self._publish(turn)
        try:
            reply = self._round_trip(free)
        except (RedisUnavailable, RedisError) as e:
            self.retrying, turn.error = True, e
            return self._publish(turn)
        self.retrying, turn.sent = False, bool(self.outbox)
        turn.ended = len(self.outbox.finished)
        self._delivered()
        self._drop_lost(reply.lost, turn)
        self._admit(reply.batch, turn)
        return self._publish(turn)

    def _engine_step(self, turn: Turn) -> StepNews | None:
        phase = "prefill" if self.table.prefilling() else "decode"
        t0 = self.clock()
        try:
            outputs = self.engine.step()
        except Exception as e:  # noqa: BLE001 - a bug must not kill a worker holding leases
            log.exception("engine step failed; giving its %d job(s) back", self.table.active)
            self._give_back_all(f"{type(e).__name__}: {e}"[:500])
            turn.engine_failed = True
            return None
        now = self.clock()
        turn.stepped = True
        news = self.table.collect(outputs, now)
        if self.metrics is not None:
            self.metrics.observe_step(phase, now - t0, news.tokens, news.ttft_s, news.inter_token_s)
            self.metrics.rate.add(now, news.tokens)
            for reason in news.reasons:
                self.metrics.ended(reason)
        return news

    def _round_trip(self, free: int) -> StepReply:
        if self.status is not None and self.outbox.finished:
            # Before the send: a renewal answered while it is out must not read
            # these ended jobs as lost (workers/status.py).
            self.status.ending([f.job_id for f in self.outbox.finished])
        t0 = self.clock()
        reply = self._step(
            self.client,
            self.model,
            self.worker_id,
            self.outbox.appends,
            self.outbox.finished,
            free,
            **self.claim_kw,
        )
        if self.metrics is not None:
            self.metrics.round_trip_seconds.labels(self.model).observe(self.clock() - t0)
        return reply

    def _delivered(self) -> None:
        if self.status is not None and self.outbox.finished:
            self.status.release([f.job_id for f in self.outbox.finished])
        self.outbox = _Outbox()

    def _drop_lost(self, lost: frozenset[str], turn: Turn) -> None:
        if not lost:
            return
        dropped = self.table.drop(lost)
        turn.lost = len(dropped)
        if dropped:
            log.info("stopped %d sequence(s): cancelled or lease lost", len(dropped))
            if self.status is not None:
                self.status.release(dropped)
            if self.metrics is not None:
                self.metrics.ended("lost", len(dropped))

    def _admit(self, batch: Batch, turn: Turn) -> None:
        if not batch.jobs:
            return
        turn.claimed = len(batch.jobs)
        if self.status is not None:
            self.status.hold([j.id for j in batch.jobs])
        now = self.clock()
        refused: list[str] = []
        for job in batch.jobs:
            waited_s = max(0.0, (batch.claimed_at_ms - job.enqueued_at_ms) / 1000)
            try:
                finished = self.table.admit(job, now, waited_s)
            except RuntimeError as e:  # no slot free: the claim took more than it may
                log.warning("engine refused job %s (%s); handing it back", job.id, e)
                refused.append(job.id)
                continue
            if finished is not None:
                log.info("job %s cannot run: %s", job.id, finished.error)
                self.outbox.finished.append(finished)
                if self.metrics is not None:
                    self.metrics.ended(INVALID_INPUT)
            elif self.metrics is not None:
                seq = self.table.seqs[job.id]
                self.metrics.prompt_tokens_total.labels(self.model).inc(seq.prompt_tokens)
        if refused:
            self._send([Outcome.release(j) for j in refused])

    def _publish(self, turn: Turn) -> Turn:
        """Slot occupancy and the output rate to the metrics and the heartbeat."""
        busy, slots = self.table.active, self.engine.slots
        turn.active = busy
        if self.metrics is not None:
            self.tokens_per_s = self.metrics.set_slots(busy, slots, self.clock())
        if self.status is not None:
            self.status.update(slots=slots, slots_busy=busy, tokens_per_s=self.tokens_per_s)
        return turn

    # -- giving jobs back ------------------------------------------------------
    def hand_back(self, reason: str) -> int:
        """Give every active sequence back to the queue so another worker runs it
        again; its undelivered tokens are dropped (the re-run streams them again).
        Returns how many.

        One that has streamed no token is released (requeued in place, the claim's
        attempt undone). One that has is retried: a new attempt, so its stream says
        RESTART and a follower skips the offsets it has (a release would re-run it
        under the same attempt number, which a follower cannot tell from the first
        run)."""
        pending = [f for f in self.outbox.finished if f.job_id not in self.table.seqs]
        self.outbox = _Outbox(finished=pending)
        seqs = self.table.clear()
        if seqs:
            log.info("handing back %d sequence(s): %s", len(seqs), reason)
            self._send(
                [
                    Outcome.retry(s.job_id, "worker_stopped", reason)
                    if s.ids
                    else Outcome.release(s.job_id)
                    for s in seqs
                ]
            )
        if pending:  # ended jobs whose completion was not sent yet: send it now
            try:
                self._round_trip(0)
                self._delivered()
            except (RedisUnavailable, RedisError) as e:
                log.warning("could not send %d ended job(s): %s", len(pending), e)
        return len(seqs)

    def _give_back_all(self, error: str) -> None:
        """The engine failed as a whole: every sequence is retried (an attempt used,
        so a job that crashes the engine ends in the dead-letter list)."""
        seqs = self.table.clear()
        self.outbox = _Outbox(finished=self.outbox.finished)
        self._send([Outcome.retry(s.job_id, "worker_error", error) for s in seqs])
        if self.metrics is not None:
            self.metrics.ended("error", len(seqs))

    def _send(self, outcomes: list[Outcome]) -> None:
        ids = [o.id for o in outcomes]
        if self.status is not None:
            self.status.ending(ids)
        send_outcomes(self.client, self.model, self.worker_id, outcomes)
        if self.status is not None:
            self.status.release(ids)
