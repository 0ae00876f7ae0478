"""Long-poll wake-ups: one pub/sub subscription per gateway process.

The reader task subscribes to every model's done channel once and resolves the
futures of the requests waiting on the ended job ids. Requests never poll
Redis: they register a waiter, read the job once, and sleep on the future.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis.asyncio as aioredis

from gateway.redis_io import raise_if_cancelling

log = logging.getLogger("sluice.gateway")
IDLE_PING_S = 30.0  # with no message for this long, ping to detect a dead connection
RECONNECT_MAX_S = 2.0


class Completions:
    def __init__(self, r: aioredis.Redis, channels: list[str]) -> None:
        self.redis = r
        self.channels = channels
        self.connected = asyncio.Event()
        self._waiters: dict[str, set[asyncio.Future[float | None]]] = {}

    @property
    def waiting(self) -> int:
        return sum(len(s) for s in self._waiters.values())

    @contextmanager
    def waiter(self, job_id: str) -> Iterator[asyncio.Future[float | None]]:
        """A future resolved when ``job_id`` ends (or when notifications may have been lost).

        Its result is the ``perf_counter`` time the notification arrived, or None.
        """
        fut: asyncio.Future[float | None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(job_id, set()).add(fut)
        try:
            yield fut
        finally:
            group = self._waiters.get(job_id)
            if group is not None:
                group.discard(fut)
                if not group:
                    del self._waiters[job_id]

    def dispatch(self, data: str) -> int:
        """Wake the waiters of comma-joined ended job ids; returns how many woke."""
        woke, now = 0, time.perf_counter()
        for job_id in data.split(","):
            for fut in self._waiters.pop(job_id, ()):
                if not fut.done():
                    fut.set_result(now)
                    woke += 1
        return woke

    def wake_all(self) -> None:
        """After a reconnect messages may be lost: every waiter re-reads its job."""
        for group in self._waiters.values():
            for fut in group:
                if not fut.done():
                    fut.set_result(None)  # not a completion: no wake-up time
        self._waiters.clear()

    async def run(self) -> None:
        delay = 0.05
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # any connection trouble: reconnect with backoff
                raise_if_cancelling()
                log.warning("completion subscription lost: %s", e)
            raise_if_cancelling()
            self.connected.clear()
            self.wake_all()
            await asyncio.sleep(delay)
            delay = min(RECONNECT_MAX_S, delay * 2)

    async def _listen(self) -> None:
        ps = self.redis.pubsub(ignore_subscribe_messages=True)
        try:
            await ps.subscribe(*self.channels)
            self.connected.set()
            self.wake_all()
            loop = asyncio.get_running_loop()
            last = loop.time()
            while True:
                # None also means "a subscribe or pong reply was skipped", so only a
                # real silence of IDLE_PING_S triggers the liveness ping.
                msg = await ps.get_message(ignore_subscribe_messages=True, timeout=IDLE_PING_S)
                now = loop.time()
                if msg is not None:
                    last = now
                    if msg.get("type") == "message":
                        self.dispatch(msg["data"])
                elif now - last >= IDLE_PING_S:
                    last = now
                    await ps.ping()
        finally:
            self.connected.clear()
            await ps.aclose()
