"""Submits coalesced: the submits requests issue in one event-loop turn, for one
model, partition, API key and admission limits, share one submit script call.

Each script call pays a fixed cost in Redis (its prologue, its per-call commands)
and each round trip a send, a receive and their syscalls, whatever it carries;
under load many single-job predicts arrive in the same turn, so N calls become
one (docs/adr/0161); a request of more than ALONE_JOBS jobs goes alone. Each
request keeps its own outcome: the script admits the call's requests one after
another, in arrival order, each all or none exactly as if it had been sent
alone, so a request gets its own id, its own idempotent replay and its own
refusal (429 or 503 with its own figures), never a neighbour's. A Redis failure
fails every request of that call, as it would have failed each of them alone.
Requests that differ in anything the script reads as one value (the limits of a
priority, the owner, the partition) go as separate calls in the same turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sluice.errors import SluiceError
from sluice.jobs import NewJob, Owner, Submitted
from sluice.queue.call import Call
from sluice.queue.client import idem_lookup
from sluice.queue.scripts import QueueOps

MAX_JOBS = 256  # jobs per call; more go in the next call of the same turn
# A request of more jobs already spreads a call's fixed cost over its own jobs: it
# goes alone, as before (coalescing measured no cheaper for 32-input batches).
ALONE_JOBS = 8

# What one call shares: model, partition, max_jobs, max_cost, owner.
Key = tuple[str, int, int, int, Owner | None]
Outcome = list[Submitted] | SluiceError
Pending = tuple[Sequence[NewJob], "asyncio.Future[list[Submitted]]"]


class SubmitBatch:
    """``run`` executes a call (the queue client's, bounded by the gateway's gate)."""

    def __init__(self, ops: QueueOps, run: Callable[[Call[Any]], Awaitable[Any]]) -> None:
        self.ops = ops
        self.run = run
        self._pending: dict[Key, list[Pending]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # held until done (no GC mid-flight)

    async def submit(
        self,
        model: str,
        jobs: Sequence[NewJob],
        *,
        max_jobs: int = 0,
        max_cost: int = 0,
        owner: Owner | None = None,
    ) -> list[Submitted]:
        """The jobs as submitted, or this request's refusal raised (as
        :meth:`sluice.queue.client.AsyncQueueClient.submit` alone: a keyed submit
        first finds its key's partition when the partition count changed)."""
        lookup = idem_lookup(self.ops, model, jobs, {"owner": owner})
        if lookup is not None:  # a key maybe made under another partition count (ADR 0163)
            p = await self.run(lookup)
        else:
            p = self.ops.parts.for_submit(model, jobs, owner.name if owner else "", False)
        if len(jobs) > ALONE_JOBS:
            lim = {"max_jobs": max_jobs, "max_cost": max_cost, "owner": owner, "partition": p}
            result: list[Submitted] = await self.run(self.ops.submit(model, jobs, **lim))
            return result
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop: the old one's submits went with it
            self._loop, self._pending = loop, {}
        fut: asyncio.Future[list[Submitted]] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.setdefault((model, p, max_jobs, max_cost, owner), []).append((jobs, fut))
        return await fut

    def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        loop = asyncio.get_running_loop()
        for key, reqs in pending.items():
            for chunk in _chunks(reqs):
                task = loop.create_task(self._send(key, chunk))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _send(self, key: Key, reqs: list[Pending]) -> None:
        live = [(jobs, f) for jobs, f in reqs if not f.done()]  # a gone client's is cancelled
        call, live = self._build(key, live)
        if call is None:
            return
        try:
            outcomes: list[Outcome] = await self.run(call)
        except asyncio.CancelledError:
            for _, f in live:
                f.cancel()
            raise
        except Exception as e:  # RedisUnavailable, NotReplicated: the call's, so each one's
            for _, f in live:
                if not f.done():
                    f.set_exception(e)
            return
        for (_, fut), outcome in zip(live, outcomes, strict=True):
            if fut.done():
                continue
            if isinstance(outcome, SluiceError):
                fut.set_exception(outcome)
            else:
                fut.set_result(outcome)

    def _build(self, key: Key, live: list[Pending]) -> tuple[Call[Any] | None, list[Pending]]:
        """The call for ``live``; a request whose jobs cannot be packed (an input the
        encoder refuses) gets that error alone and the others go without it."""
        try:
            return (self._call(key, live) if live else None), live
        except Exception:
            kept = []
            for jobs, f in live:
                try:
                    self._call(key, [(jobs, f)])
                except Exception as e:
                    f.set_exception(e)
                else:
                    kept.append((jobs, f))
            return (self._call(key, kept) if kept else None), kept

    def _call(self, key: Key, live: list[Pending]) -> Call[Any]:
        model, p, max_jobs, max_cost, owner = key
        return self.ops.submit_many(
            model,
            [jobs for jobs, _ in live],
            max_jobs=max_jobs,
            max_cost=max_cost,
            owner=owner,
            partition=p,
        )


def _chunks(reqs: list[Pending]) -> list[list[Pending]]:
    """Requests in order, at most MAX_JOBS jobs a call (a larger request goes alone)."""
    out: list[list[Pending]] = []
    size = 0
    for req in reqs:
        if not out or (out[-1] and size + len(req[0]) > MAX_JOBS):
            out.append([])
            size = 0
        out[-1].append(req)
        size += len(req[0])
    return out
