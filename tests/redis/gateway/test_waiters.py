"""The completion subscription: liveness pings, half-open connections, no lost waiters.

A loopback TCP proxy stands between the subscriber and a real Redis; ``freeze()``
turns its open connections into black holes (nothing passes, nothing closes),
which is what a half-open connection looks like from the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from gateway.redis_io import connect
from gateway.waiters import JobWaiters, Liveness, ended_jobs
from sluice import keys
from sluice.jobs import NewJob, Outcome
from sluice.queue import AsyncQueueClient
from sluice.queue.client import connect_async
from tests.kit.gateway import gateway_config

IDLE_S = 0.2  # pings after 0.2 s of silence, gives up after 0.4 s


@pytest.mark.parametrize(
    ("events", "decisions"),
    [
        # idle 10: nothing before 10 s, a ping at 10, still waiting at 19.9, dead at 20
        ([5.0, 10.0, 19.9, 20.0], [None, "ping", None, "dead"]),
        # the ping is sent once, however often the read times out early
        ([10.0, 12.0, 15.0], ["ping", None, None]),
    ],
)
def test_liveness_pings_once_then_gives_up(events: list[float], decisions: list[str]) -> None:
    live = Liveness(10.0, heard_at=0.0)
    assert [live.due(t) for t in events] == decisions


def test_liveness_any_reply_resets_the_clock() -> None:
    live = Liveness(10.0, heard_at=0.0)
    assert live.wait_s(0.0) == 10.0
    assert live.due(10.0) == "ping" and live.wait_s(10.0) == 10.0  # up to 20 s for the PONG
    live.heard(12.0)  # the PONG
    assert live.due(21.0) is None and live.due(22.0) == "ping" and live.due(31.9) is None


@dataclass
class Link:
    writers: list[asyncio.StreamWriter]
    frozen: bool = False


@dataclass
class Proxy:
    """Forwards loopback TCP to Redis; counts bytes each way; can black-hole live links."""

    target_port: int
    links: list[Link] = field(default_factory=list)
    up: int = 0  # bytes client -> Redis
    down: int = 0  # bytes Redis -> client
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    def freeze(self) -> None:
        for link in self.links:
            link.frozen = True

    async def _accept(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection("127.0.0.1", self.target_port)
        link = Link([cw, sw])
        self.links.append(link)
        for src, dst, way in ((cr, sw, "up"), (sr, cw, "down")):
            task = asyncio.create_task(self._pump(src, dst, link, way))
            self.tasks.add(task)

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, link: Link, way: str
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await src.read(65536):
                if link.frozen:
                    continue  # swallowed: neither end learns anything
                setattr(self, way, getattr(self, way) + len(data))
                dst.write(data)
                await dst.drain()
        if not link.frozen:
            dst.close()

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for link in self.links:
            for w in link.writers:
                w.close()
        if self.server is not None:
            self.server.close()


@dataclass
class Rig:
    waiters: JobWaiters
    proxy: Proxy
    queue: AsyncQueueClient
    direct: aioredis.Redis

    async def job(self, text: str = "a") -> str:
        return (await self.queue.submit("m", [NewJob(input=text, bucket="32", cost=1)]))[0].id

    async def finish(self, job_id: str) -> None:
        batch = await self.queue.claim("m", "w1", max_batch=1)
        assert [j.id for j in batch.jobs] == [job_id]  # FIFO: the oldest queued job
        await self.queue.complete("m", [Outcome.ok(job_id, 1)])


@pytest_asyncio.fixture(loop_scope="function")
async def rig(redis_url: str) -> AsyncIterator[Rig]:
    url = urlsplit(redis_url)
    proxy = Proxy(int(url.port or 6379))
    port = await proxy.start()
    pubsub = connect(f"redis://127.0.0.1:{port}{url.path}", 1.0, blocking_reads=True)
    direct = connect_async(redis_url)
    c = JobWaiters(
        pubsub, [keys.done_channel("m")], reads=direct, timeout_s=1.0, idle_ping_s=IDLE_S
    )
    task = asyncio.create_task(c.run())
    try:
        await asyncio.wait_for(c.connected.wait(), 5)
        yield Rig(c, proxy, AsyncQueueClient(direct, dict(gateway_config().models)), direct)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await proxy.close()
        await pubsub.aclose()
        await direct.aclose()


async def test_pongs_keep_an_idle_subscription(rig: Rig) -> None:
    up, down = rig.proxy.up, rig.proxy.down
    await asyncio.sleep(6 * IDLE_S)  # about five pings' worth of silence
    assert rig.proxy.up > up and rig.proxy.down > down, "no ping was sent or answered"
    assert rig.waiters.reconnects == 0 and rig.waiters.connected.is_set()
    job_id = await rig.job()
    with rig.waiters.waiter(job_id) as fut:
        await rig.finish(job_id)
        assert isinstance(await asyncio.wait_for(fut, 2), float)  # a real notification


async def test_a_half_open_subscription_is_replaced_and_no_waiter_is_lost(rig: Rig) -> None:
    c = rig.waiters
    ends, stays = await rig.job("ends"), await rig.job("stays")
    with c.waiter(ends) as fut, c.waiter(stays) as other:
        rig.proxy.freeze()
        await rig.finish(ends)  # published into the black hole
        await asyncio.sleep(0.05)
        assert not fut.done() and c.connected.is_set()  # the loss is not yet visible
        # Detected within 2 x 0.2 s, reconnected, then the re-check finds the job ended.
        assert await asyncio.wait_for(fut, 5) is None  # woken by the re-check, no timing
        assert c.reconnects >= 1
        await asyncio.wait_for(c.connected.wait(), 5)
        assert not other.done() and c.waiting == 1  # still waiting, still registered
        await rig.finish(stays)
        assert isinstance(await asyncio.wait_for(other, 2), float)  # the new subscription


async def test_the_recheck_reads_every_waiter_in_one_round_trip(rig: Rig) -> None:
    ended, queued = await rig.job("e"), await rig.job("q")
    await rig.finish(ended)
    gone = "m.000000000000000000000000000"  # expired, or never existed: its waiter reads it
    found = await ended_jobs(rig.direct, [ended, queued, gone, "nodot"])
    assert sorted(found) == sorted([ended, gone])
    c = rig.waiters
    with c.waiter(ended) as a, c.waiter(queued) as b:
        assert await c.recheck() == 1
        assert a.done() and not b.done()
