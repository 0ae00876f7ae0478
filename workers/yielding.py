"""Bulk that yields (issue 31, ADR 0155): a bulk batch runs as micro-batches, and
between two of them the worker gives the rest back if an interactive job waits.

A started handler call cannot be interrupted, so an interactive job that arrives
while every worker runs bulk waits for one to finish. Run as ``micro_batch``-item
handler calls, a bulk batch can stop after any of them: the worker reads whether
a served queue holds an interactive job (one pipelined ZCOUNT per bucket, about a
round trip beside a handler call of tens of ms) and, if one does, stops there.
The items that never ran go back with ``Outcome.release``: requeued in their place,
the claim's attempt undone, never counted as a failure; the bulk coordinator sees
them queued again and gathers each once, when it ends (ADR 0090).

What this module owns: the probe (:class:`InteractiveProbe`), the micro-batch
loop (:func:`run_yielding`) and merging the micro-batches' results. The worker
(workers/worker.py) calls it for bulk batches only; interactive batches run whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import redis
from prometheus_client import CollectorRegistry, Counter

from sluice import keys
from sluice.jobs import Batch, ClaimedJob, Outcome
from sluice.records import BULK_RANK, score_range
from workers.execute import BatchResult, BatchRunner
from workers.handlers.base import Collated

if TYPE_CHECKING:
    from workers.worker import Worker

log = logging.getLogger("sluice.worker")


class InteractiveProbe:
    """Whether any served queue holds an interactive (high, normal, low) job."""

    def __init__(self, r: redis.Redis, model: str, buckets: Sequence[str]) -> None:
        self.redis, self.model = r, model
        self.queues = [keys.queue_key(model, b) for b in buckets]
        # Every class below bulk: scores [0, BULK_RANK x SCORE_SCALE).
        self.max_score = score_range(BULK_RANK)[0]

    def waiting(self) -> bool:
        pipe = self.redis.pipeline(transaction=False)
        for q in self.queues:
            pipe.zcount(q, 0, f"({self.max_score}")
        return any(int(n) > 0 for n in pipe.execute())


@dataclass
class Yielded:
    """A bulk batch run in micro-batches: what ran, and what was given back."""

    result: BatchResult  # the outcomes of the items that ran
    ran: list[ClaimedJob]
    left: list[ClaimedJob] = field(default_factory=list)  # never ran: to release

    @property
    def releases(self) -> list[Outcome]:
        """One release per item that never ran: requeued in its place, no attempt used."""
        return [Outcome.release(j.id) for j in self.left]


def merge(results: Sequence[BatchResult]) -> BatchResult:
    """One result for micro-batches run one after another. It ``failed`` (the
    worker's fault: requeue all, count towards quarantine) only if every one did."""
    out = BatchResult([], failed=bool(results) and all(r.failed for r in results))
    for r in results:
        out.outcomes.extend(r.outcomes)
        out.oom_splits += r.oom_splits
        out.infer_s += r.infer_s
        out.padded_tokens += r.padded_tokens
        out.real_tokens += r.real_tokens
        for k, v in r.errors.items():
            out.errors[k] = out.errors.get(k, 0) + v
    return out


def run_yielding(
    runner: BatchRunner,
    jobs: list[ClaimedJob],
    micro_batch: int,
    should_yield: Callable[[list[ClaimedJob]], bool],
) -> Yielded:
    """Run ``jobs`` as handler calls of ``micro_batch`` items; before each call but
    the first, stop if ``should_yield(the jobs not run yet)`` (given back, never run).

    A failed micro-batch stops the batch too: the rest go back unrun rather than
    into a worker that just failed (the failure still counts, as a whole batch's)."""
    results: list[BatchResult] = []
    done = 0
    while done < len(jobs):
        if done and should_yield(jobs[done:]):
            break
        part = jobs[done : done + micro_batch]
        res = runner.run(part)
        results.append(res)
        done += len(part)
        if res.failed:
            break
    return Yielded(merge(results), jobs[:done], jobs[done:])


class BulkYield:
    """A worker's bulk batches, run to yield: ``bulk.micro_batch`` items per handler
    call, the rest given back when an interactive job waits between two calls."""

    def __init__(
        self,
        probe: InteractiveProbe,
        micro_batch: int,
        registry: CollectorRegistry,
        all_stopped: Callable[[list[str]], bool] = lambda ids: False,
    ) -> None:
        self.probe, self.micro_batch, self.model = probe, micro_batch, probe.model
        # Jobs the renewal saw end while held (a cancelled bulk job, ADR 0154): a
        # batch whose rest all ended stops too, without counting as a yield.
        self.all_stopped = all_stopped
        self.yields = Counter(
            "sluice_worker_bulk_yields_total",
            "Bulk batches stopped between micro-batches for an interactive job.",
            ["model"],
            registry=registry,
        )
        self.released = Counter(
            "sluice_worker_bulk_items_released_total",
            "Bulk items given back unrun (requeued, no attempt used) by those yields.",
            ["model"],
            registry=registry,
        )
        self._said = False

    @classmethod
    def of(cls, w: Worker) -> BulkYield | None:
        """None when the worker's model leaves ``bulk.micro_batch`` unset: bulk
        batches run whole."""
        size = w.mcfg.bulk.micro_batch
        if not size:
            return None
        probe = InteractiveProbe(w.client.redis, w.model, w.buckets)
        return cls(probe, size, w.metrics.registry, w.status.all_stopped)

    def run(self, runner: BatchRunner, batch: Batch) -> tuple[Batch, BatchResult, list[Outcome]]:
        """The part of ``batch`` that ran, its result, and a release for each other item."""
        got = run_yielding(runner, batch.jobs, self.micro_batch, self._should_yield)
        if got.left and not self.all_stopped([j.id for j in got.left]):
            self.yields.labels(self.model).inc()
            self.released.labels(self.model).inc(len(got.left))
        return replace(batch, jobs=got.ran), got.result, got.releases

    def _should_yield(self, rest: list[ClaimedJob]) -> bool:
        if self.all_stopped([j.id for j in rest]):
            return True
        try:
            waiting = self.probe.waiting()
        except (redis.RedisError, OSError) as e:
            # Cannot ask: keep running (the complete after the batch rides out the outage).
            if not self._said:
                log.warning("bulk yield probe failed, running the batch on: %s", e)
            self._said = True
            return False
        self._said = False
        return waiting


def run_batch(
    runner: BatchRunner, bulk_yield: BulkYield | None, batch: Batch, collated: Collated | None
) -> tuple[Batch, BatchResult, list[Outcome]]:
    """A claimed batch: a bulk one through ``bulk_yield`` when the model sets
    ``bulk.micro_batch``, any other whole. The part that ran, its result, releases."""
    if batch.bulk and bulk_yield is not None:
        return bulk_yield.run(runner, batch)
    return batch, runner.run(batch.jobs, collated), []
