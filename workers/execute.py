"""Run one claimed batch through a handler, with the fault paths.

- Out of memory: drop the failed attempt (its exception's traceback holds the
  attempt's tensors, so no retry runs inside the ``except``), free the device
  cache, split the batch in halves, retry each half (recursively); the caller
  lowers its token budget.
- Any other error: retry item by item, so a poison input fails alone. If some
  items succeed alone, the ones that still fail are poison: they fail for good.
  If every item fails, the batch failed (likely this worker, not the inputs):
  the jobs go back to the queue to run elsewhere and the failure counts
  towards quarantine.
- ``InvalidInput`` (or a ``UnicodeError``) raised for a single input fails that
  input for good and never counts against the worker.
- Stopped (ADR 0154): a handler that raises ``Stopped`` (its ``should_stop()``:
  every job of the attempt ended elsewhere, cancelled or past a limit) leaves its
  jobs without an outcome, and the batch is not failed: one slow input never
  counts against the worker. Item-by-item retries skip stopped jobs.
- A job the queue marked malformed (its stored input is not JSON: written by
  something other than the gateway), or whose input the handler's ``validate``
  refuses, never reaches ``collate``: it fails for good (``malformed_job``,
  ``InvalidInput``) and the rest of the batch runs as one batch without it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluice.errors import InvalidInput
from sluice.jobs import ClaimedJob, Outcome
from workers.budget import TokenBudget
from workers.handlers.base import Collated, Handler, Shape, Stopped

log = logging.getLogger("sluice.worker")

MAX_MESSAGE = 500
MALFORMED = "malformed_job"  # the error type claim.lua uses for unusable records too


@dataclass
class BatchResult:
    outcomes: list[Outcome]
    failed: bool = False  # every item failed for reasons of this worker
    oom_splits: int = 0
    infer_s: float = 0.0  # seconds inside the handler (collate excluded when prefetched)
    padded_tokens: int = 0
    real_tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def succeeded(self) -> int:
        return sum(1 for o in self.outcomes if o.kind == "ok")


def _input_fault(exc: BaseException) -> bool:
    # A UnicodeError is about the data, never the device: a lone surrogate (valid
    # JSON, not encodable) reaches a handler that encodes text, e.g. a tokenizer.
    return isinstance(exc, InvalidInput | UnicodeError)


def _error(exc: BaseException) -> tuple[str, str]:
    return type(exc).__name__, (str(exc) or type(exc).__name__)[:MAX_MESSAGE]


@dataclass(frozen=True)
class _Failure:
    """What a failed attempt leaves behind: strings and flags, never the exception."""

    error: tuple[str, str]
    invalid: bool  # the input's fault (InvalidInput, UnicodeError)
    oom: bool  # the device ran out of memory
    stopped: bool = False  # the handler stopped: its jobs ended elsewhere


@dataclass
class _Item:
    job: ClaimedJob
    result: Any = None
    ok: bool = False
    error: tuple[str, str] | None = None
    invalid: bool = False
    oom: bool = False
    stopped: bool = False
    run_ms: float = 0.0


class BatchRunner:
    """Runs batches on one handler; stateless between batches."""

    def __init__(
        self,
        handler: Handler,
        clock: Callable[[], float] = time.perf_counter,
        all_stopped: Callable[[list[str]], bool] | None = None,
    ) -> None:
        """``all_stopped(ids)``: whether every one of these jobs ended elsewhere (the
        worker's status, fed by its renewals); the handler's ``should_stop``."""
        self.handler = handler
        self.clock = clock
        self.all_stopped = all_stopped or (lambda ids: False)

    def run(self, jobs: list[ClaimedJob], collated: Collated | None = None) -> BatchResult:
        res = BatchResult([])
        good = self._screen(jobs, res)
        if len(good) < len(jobs):
            jobs, collated = good, None  # a prefetched collation held the bad ones
            if not jobs:
                return res
        items = [_Item(j) for j in jobs]
        if self._attempt(items, collated, res):
            for item in items:  # item by item: one poison input must fail alone
                if item.ok or item.error is not None or item.stopped:
                    continue
                if self.all_stopped([item.job.id]):
                    item.stopped = True
                else:
                    self._attempt([item], None, res)
        self._outcomes(items, res)
        return res

    def _screen(self, jobs: list[ClaimedJob], res: BatchResult) -> list[ClaimedJob]:
        """The jobs worth running; the malformed and the invalid fail here, alone."""
        good = []
        for j in jobs:
            err: tuple[str, str] | None = None
            if j.malformed is not None:
                err = (MALFORMED, str(j.malformed)[:MAX_MESSAGE])
            else:
                try:
                    self.handler.validate(j.input)
                except (InvalidInput, UnicodeError) as e:
                    err = _error(e)
            if err is None:
                good.append(j)
                continue
            res.outcomes.append(Outcome.fail(j.id, *err))
            res.errors[err[0]] = res.errors.get(err[0], 0) + 1
        return good

    def _attempt(self, items: list[_Item], collated: Collated | None, res: BatchResult) -> bool:
        """Run ``items`` as one batch; True if it failed (an out-of-memory split that
        recovered did not). Only a record of a failure outlives ``_call``, never the
        exception: its traceback would keep the failed attempt's tensors alive."""
        t0 = self.clock()
        got = self._call(items, collated)
        elapsed = self.clock() - t0
        res.infer_s += elapsed
        if isinstance(got, _Failure):
            return self._failed(items, got, elapsed, res)
        results, done = got
        res.padded_tokens += done.padded_tokens
        res.real_tokens += done.real_tokens
        for item, value in zip(items, results, strict=True):
            item.result, item.ok, item.error, item.run_ms = value, True, None, elapsed * 1000
        return False

    def _call(
        self, items: list[_Item], collated: Collated | None
    ) -> tuple[list[Any], Collated] | _Failure:
        h = self.handler
        ids = [i.job.id for i in items]
        h.bind_stop(lambda: self.all_stopped(ids))
        try:
            if collated is None:
                collated = h.collate([i.job.input for i in items], [i.job.cost for i in items])
            results = h.postprocess(h.infer(collated), collated)
            if len(results) != len(items):
                n, want = len(results), len(items)
                raise RuntimeError(f"handler returned {n} results for {want} inputs")
        except Stopped:
            return _Failure(("Stopped", "stopped: the jobs ended elsewhere"), False, False, True)
        except Exception as e:  # noqa: BLE001 - a handler may raise anything
            return _Failure(_error(e), _input_fault(e), h.is_oom(e))
        finally:
            h.bind_stop(None)
        return results, collated

    def _failed(self, items: list[_Item], f: _Failure, elapsed: float, res: BatchResult) -> bool:
        if f.stopped:
            for item in items:
                item.stopped, item.run_ms = True, elapsed * 1000
            return False
        if f.oom and len(items) > 1:
            # The exception and its frames are gone by now, so the cache can be freed.
            self.handler.free_memory()
            res.oom_splits += 1
            mid = len(items) // 2
            for half in (items[:mid], items[mid:]):
                if self._attempt(half, None, res) and len(half) > 1:
                    return True  # the caller goes item by item over what is left
            return False
        if len(items) == 1:
            items[0].error, items[0].invalid, items[0].oom = f.error, f.invalid, f.oom
            items[0].run_ms = elapsed * 1000
        return True

    @staticmethod
    def _outcomes(items: list[_Item], res: BatchResult) -> None:
        items = [i for i in items if not i.stopped]  # ended elsewhere: no outcome
        any_ok = any(i.ok for i in items)
        worker_fault = [i for i in items if not i.ok and not i.invalid]
        res.failed = bool(worker_fault) and not any_ok and len(worker_fault) == len(items)
        for i in items:
            if i.ok:
                res.outcomes.append(Outcome.ok(i.job.id, i.result, i.run_ms))
                continue
            err_type, message = i.error or ("RuntimeError", "no result")
            res.errors[err_type] = res.errors.get(err_type, 0) + 1
            # Out of memory on one input may fit a bigger device: never final here.
            if i.invalid or (any_ok and not i.oom):
                res.outcomes.append(Outcome.fail(i.job.id, err_type, message, i.run_ms))
            else:
                res.outcomes.append(Outcome.retry(i.job.id, err_type, message, i.run_ms))


def warm_up(handler: Handler, shapes: list[Shape], budget: TokenBudget) -> None:
    """Run each shape once; on out of memory halve its batch and cap ``budget`` for good.

    Raises what the handler raised if even one input of a shape does not fit.
    """
    for shape in shapes:
        while not _warmed(handler, shape):
            # The failed attempt's exception is gone by now, so its memory can be freed.
            handler.free_memory()
            shape = Shape(shape.batch // 2, shape.tokens)
            limit = budget.cap(shape.batch * shape.tokens)
            log.warning("out of memory at warm-up; token budget now %d", limit)


def _warmed(handler: Handler, shape: Shape) -> bool:
    """False if ``shape`` ran out of memory and its batch can still be halved."""
    try:
        handler.warmup([shape])
    except Exception as e:  # noqa: BLE001 - re-raised unless an out of memory to halve
        if not handler.is_oom(e) or shape.batch == 1:
            raise
        return False
    return True
