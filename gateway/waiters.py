"""Long-poll wake-ups (job waiters; not OpenAI completions): one pub/sub subscription
per gateway process.

The reader task subscribes to every model's done channel once and resolves the
futures of the requests waiting on the ended job ids. Requests never poll
Redis: they register a waiter, read the job once, and sleep on the future.

A half-open connection (the peer gone without a FIN or RST) never fails a read,
and redis-py's pub/sub ping only sends: so the reader itself expects a reply. When
nothing at all (not even the PONG of its own ping) arrives within two idle ping
intervals, it reconnects and resubscribes. Waiters stay registered across the gap;
after each subscribe one pipelined read re-checks their jobs, so a completion
published while the subscription was down still wakes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from gateway.redis_io import bounded, raise_if_cancelling
from sluice import keys
from sluice.backoff import Reconnect
from sluice.errors import ShuttingDown
from sluice.jobs import JobStatus, model_of
from sluice.records import JobField

log = logging.getLogger("sluice.gateway")
IDLE_PING_S = 30.0  # with nothing heard for this long, ping; silent for twice this: reconnect
RECONNECT_BASE_S = 0.05
RECONNECT_MAX_S = 2.0
PING_MESSAGE = "sluice-liveness"  # not redis-py's health-check message, which it swallows


class SilentConnection(ConnectionError):
    """No reply at all, not even to a ping, for two idle ping intervals."""


@dataclass
class Liveness:
    """When to ping and when to give a silent subscription up (pure; ``now`` passed in)."""

    idle_s: float
    heard_at: float
    pinged: bool = False

    def heard(self, now: float) -> None:
        self.heard_at, self.pinged = now, False

    def wait_s(self, now: float) -> float:
        """How long to read before the next decision."""
        due = self.heard_at + (2 if self.pinged else 1) * self.idle_s
        return max(0.0, due - now)

    def due(self, now: float) -> str | None:
        """Dead after 2x idle of silence, ping after 1x (once), else None."""
        silence = now - self.heard_at
        if silence >= 2 * self.idle_s:
            return "dead"
        if silence >= self.idle_s and not self.pinged:
            self.pinged = True
            return "ping"
        return None


async def ended_jobs(r: aioredis.Redis, job_ids: Iterable[str]) -> list[str]:
    """The ids among ``job_ids`` whose job has ended or is gone, in one pipelined read."""
    ids = [j for j in job_ids if model_of(j)]
    pipe = r.pipeline(transaction=False)
    for job_id in ids:
        pipe.hget(keys.job_key(str(model_of(job_id)), job_id), JobField.STATUS)
    statuses = await pipe.execute() if ids else []
    return [j for j, s in zip(ids, statuses, strict=True) if s is None or _ended(s)]


def _ended(status: str) -> bool:
    try:
        return JobStatus(status).terminal
    except ValueError:
        return True  # unknown to us: let the waiter read it and answer as it is


class JobWaiters:
    def __init__(
        self,
        r: aioredis.Redis,
        channels: list[str],
        *,
        reads: aioredis.Redis | None = None,
        timeout_s: float = 2.0,
        idle_ping_s: float = IDLE_PING_S,
    ) -> None:
        self.redis = r
        self.reads = reads if reads is not None else r  # for the re-check after a subscribe
        self.channels = channels
        self.timeout_s = timeout_s
        self.idle_ping_s = idle_ping_s
        self.connected = asyncio.Event()
        self.reconnects = 0  # subscriptions lost (errors or silence) since start
        self.retry = Reconnect(
            log, "gateway completions", base_s=RECONNECT_BASE_S, cap_s=RECONNECT_MAX_S
        )
        self._waiters: dict[str, set[asyncio.Future[float | None]]] = {}
        self.closing = False  # set on SIGTERM: every wait ends at once with ShuttingDown

    @property
    def waiting(self) -> int:
        return sum(len(s) for s in self._waiters.values())

    @contextmanager
    def waiter(self, job_id: str) -> Iterator[asyncio.Future[float | None]]:
        """A future resolved when ``job_id`` ends.

        Its result is the ``perf_counter`` time the notification arrived, or None
        when the re-check after a resubscribe found the job ended.
        """
        fut = self.add(job_id)
        try:
            yield fut
        finally:
            self.drop(job_id, fut)

    def add(self, job_id: str) -> asyncio.Future[float | None]:
        """:meth:`waiter`'s future, registered; give it back with :meth:`drop`."""
        fut: asyncio.Future[float | None] = asyncio.get_running_loop().create_future()
        if self.closing:
            fut.set_exception(ShuttingDown("this gateway is shutting down; retry"))
        else:
            self._waiters.setdefault(job_id, set()).add(fut)
        return fut

    def drop(self, job_id: str, fut: asyncio.Future[float | None]) -> None:
        """Unregister a future of :meth:`add` (done or not)."""
        if fut.done() and not fut.cancelled():
            fut.exception()  # retrieved: no "exception never retrieved" at GC
        group = self._waiters.get(job_id)
        if group is not None:
            group.discard(fut)
            if not group:
                del self._waiters[job_id]

    def dispatch(self, data: str) -> int:
        """Wake the waiters of comma-joined ended job ids; returns how many woke."""
        return self._wake(data.split(","), time.perf_counter())

    def close(self) -> int:
        """End every long-poll now with ShuttingDown (503 + Retry-After; an ended job
        still answers 200), and every later one too; returns how many were waiting.

        Without it a graceful shutdown waits for long-polls (up to a minute) and
        then cuts them; clients re-poll at once instead, on another replica or on
        this one restarted."""
        self.closing = True
        woke = 0
        for group in self._waiters.values():
            for fut in group:
                if not fut.done():
                    fut.set_exception(ShuttingDown("this gateway is shutting down; retry"))
                    woke += 1
        self._waiters.clear()
        return woke

    def _wake(self, job_ids: Iterable[str], at: float | None) -> int:
        woke = 0
        for job_id in job_ids:
            for fut in self._waiters.pop(job_id, ()):
                if not fut.done():
                    fut.set_result(at)
                    woke += 1
        return woke

    async def recheck(self) -> int:
        """Wake the waiters whose job ended while no notification could arrive."""
        if not self._waiters:
            return 0
        ended = await bounded(ended_jobs(self.reads, list(self._waiters)), self.timeout_s)
        return self._wake(ended, None)  # not a notification: no wake-up time

    async def run(self) -> None:
        """Subscribe, and resubscribe after any loss with jittered backoff (ADR 0065);
        one log line when the subscription goes and one when it is back."""
        while True:
            error: object = "subscription ended"
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # any connection trouble: reconnect with backoff
                raise_if_cancelling()
                error = e or type(e).__name__
            raise_if_cancelling()
            self.reconnects += 1
            if self.connected.is_set():  # it had worked: start the backoff over
                self.retry.backoff.reset()
            self.connected.clear()
            await asyncio.sleep(self.retry.failed(error))

    async def _listen(self) -> None:
        if isinstance(self.redis, AsyncRedisCluster):
            # Its pub/sub routes by the slot map, which a client learns on first use.
            # SUBSCRIBE (not SSUBSCRIBE): a cluster broadcasts PUBLISH to every node,
            # so one node's connection hears every model's channel.
            await self.redis.initialize()
        ps = self.redis.pubsub(ignore_subscribe_messages=True)
        try:
            await ps.subscribe(*self.channels)
            # Subscribed first, then re-checked: an end after the read is published to us.
            await self.recheck()
            self.connected.set()
            self.retry.ok()
            loop = asyncio.get_running_loop()
            live = Liveness(self.idle_ping_s, loop.time())
            while True:
                # parse_response, not get_message: any reply (subscribe confirmations,
                # our PONG) is a sign of life, not only the messages get_message returns.
                reply = await ps.parse_response(block=False, timeout=live.wait_s(loop.time()))
                if reply is not None:
                    live.heard(loop.time())
                    if isinstance(reply, str | bytes):  # a bare PONG (a cluster's pub/sub)
                        continue
                    msg = await ps.handle_message(reply, ignore_subscribe_messages=True)
                    if msg is not None and msg.get("type") == "message":
                        self.dispatch(msg["data"])
                    continue
                action = live.due(loop.time())
                if action == "dead":
                    raise SilentConnection(f"no reply for {2 * self.idle_ping_s:g} s")
                if action == "ping":
                    async with asyncio.timeout(self.timeout_s):  # a full send buffer is dead too
                        await ps.ping(PING_MESSAGE)
        finally:
            # Bounded: closing a half-open connection must not hold the reconnect up.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.timeout_s):
                    await ps.aclose()
