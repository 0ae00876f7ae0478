"""Job reads coalesced: the reads requests issue in one event-loop turn share one
pipelined Redis round trip.

One complete call ends a whole batch of jobs and publishes their ids in one
message, so every request waiting on them wakes in the same turn and reads its
job: N round trips for one batch become one (each round trip costs the gateway
and Redis a send, a receive and their syscalls, whatever it carries). Each read
keeps its own outcome: a job that is gone is that request's 404, not its
neighbours'; a Redis failure fails the reads of that round trip, as it would have
failed each of them alone. The round trip is bounded like any other gateway call
(:class:`gateway.redis_io.RedisGate`: one slot, one deadline).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio as aioredis

from sluice.queue.scripts import Call

T = TypeVar("T")
MAX_CALLS = 512  # reads per round trip; more wait for the next one


class ReadBatch:
    def __init__(
        self, r: aioredis.Redis, gate: Callable[[Awaitable[list[Any]]], Awaitable[list[Any]]]
    ) -> None:
        self.redis = r
        self.gate = gate
        self._pending: list[tuple[Call[Any], asyncio.Future[Any]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # held until done (no GC mid-flight)

    async def read(self, call: Call[T]) -> T:
        """The parsed reply of a read-only ``call`` (commands, no script)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop: the old one's reads went with it
            self._loop, self._pending = loop, []
        fut: asyncio.Future[T] = loop.create_future()
        self._pending.append((call, fut))
        if len(self._pending) == 1:
            loop.call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:MAX_CALLS], self._pending[MAX_CALLS:]
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[tuple[Call[Any], asyncio.Future[Any]]]) -> None:
        live = [(c, f) for c, f in batch if not f.done()]  # a disconnected client's is cancelled
        if not live:
            return
        try:
            replies = await self.gate(_pipelined(self.redis, [c for c, _ in live]))
        except asyncio.CancelledError:
            for _, f in live:
                f.cancel()
            raise
        except Exception as e:  # RedisUnavailable (the gate's deadline included)
            for _, f in live:
                if not f.done():
                    f.set_exception(e)
            return
        for (call, fut), reply in zip(live, replies, strict=True):
            if not fut.done():
                _settle(fut, call, reply)


def _settle(fut: asyncio.Future[Any], call: Call[Any], replies: list[Any]) -> None:
    failed = next((r for r in replies if isinstance(r, Exception)), None)
    if failed is not None:
        fut.set_exception(failed)
        return
    try:
        fut.set_result(call.parse(replies))
    except Exception as e:  # JobNotFound and the like: this read's own answer
        fut.set_exception(e)


async def _pipelined(r: aioredis.Redis, calls: list[Call[Any]]) -> list[list[Any]]:
    """Every call's commands in one pipeline; each call's share of the replies."""
    pipe = r.pipeline(transaction=False)
    spans = []
    for call in calls:
        spans.append(len(call.commands))
        for cmd in call.commands:
            pipe.execute_command(*cmd)
    flat = await pipe.execute(raise_on_error=False)
    out, i = [], 0
    for n in spans:
        out.append(flat[i : i + n])
        i += n
    return out
