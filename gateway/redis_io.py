"""Redis access for the gateway: bounded in time, errors turned into RedisUnavailable."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis

from gateway.packing import pack_in_c
from sluice.connection import UNAVAILABLE_ERRORS, ClientOptions, async_client
from sluice.errors import RedisUnavailable
from sluice.queue.scripts import Call

T = TypeVar("T")
_UNAVAILABLE = (*UNAVAILABLE_ERRORS, asyncio.TimeoutError)


def connect(
    url: str, timeout_s: float, *, max_connections: int = 256, blocking_reads: bool = False
) -> aioredis.Redis:
    """A client whose every command is bounded by ``timeout_s`` and retried at most once.

    redis-py's default retry policy (backoff up to seconds, several attempts) could
    hold a request far past the timeout; a gateway must answer 503 promptly instead.
    The pool holds up to ``max_connections``; :class:`RedisGate` keeps the number of
    commands in flight under it, so a burst waits for a slot instead of failing
    with "Too many connections" (redis-py's default pool raises it past 100 in
    flight). redis-py's BlockingConnectionPool would also wait, but it takes an
    asyncio.Condition lock on every checkout and release; a semaphore costs
    nothing while slots are free. Commands are packed in C (gateway.packing).
    ``blocking_reads`` is for the pub/sub connection, which waits for messages.
    """
    client = async_client(
        url,
        ClientOptions(
            timeout_s=timeout_s,
            read_timeout_s=None if blocking_reads else timeout_s,
            max_connections=max_connections,
            backoff=False,
            keepalive=True,
        ),
    )
    return pack_in_c(client)  # type: ignore[no-any-return]


async def bounded(aw: Awaitable[T], timeout_s: float, slots: asyncio.Semaphore | None = None) -> T:
    """Await a Redis operation with a hard deadline; failures become RedisUnavailable.

    With ``slots``, waiting for a free slot counts against the same deadline.
    """
    try:
        async with asyncio.timeout(timeout_s):
            if slots is None:
                return await aw
            async with slots:
                return await aw
    except RedisUnavailable:
        raise
    except _UNAVAILABLE as e:
        raise RedisUnavailable(f"Redis unavailable: {e or type(e).__name__}") from e
    finally:
        # Timed out while waiting for a slot: the call never started; close it quietly.
        if inspect.iscoroutine(aw) and inspect.getcoroutinestate(aw) == inspect.CORO_CREATED:
            aw.close()


class RedisGate:
    """Every gateway Redis call: bounded in time and in how many run at once."""

    def __init__(self, timeout_s: float, max_in_flight: int) -> None:
        self.timeout_s = timeout_s
        self.slots = asyncio.Semaphore(max_in_flight)

    async def __call__(self, aw: Awaitable[T]) -> T:
        return await bounded(aw, self.timeout_s, self.slots)


def raise_if_cancelling() -> None:
    """Re-raise a cancellation that a client library turned into another error.

    Some clients (fakeredis, redis-py mid-pipeline) convert CancelledError into a
    connection error; a retry loop that caught it would then never stop.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def run_reads(r: aioredis.Redis, calls: Sequence[Call[Any]]) -> list[Any]:
    """Several read-only calls in one pipelined round trip, each parsed by its own parser."""
    pipe = r.pipeline(transaction=False)
    spans = []
    for call in calls:
        spans.append(len(call.commands))
        for cmd in call.commands:
            pipe.execute_command(*cmd)
    replies = await pipe.execute()
    out, i = [], 0
    for call, n in zip(calls, spans, strict=True):
        out.append(call.parse(replies[i : i + n]))
        i += n
    return out
