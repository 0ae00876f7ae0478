"""The token hub without a server: a failing read is retried from the same cursors
(nothing lost, nothing twice), a slow listener is ended, and the cap is a 429."""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis
import pytest
from fakeredis import aioredis as fake_aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.redis_io import RedisGate
from gateway.token_hub import TokenHub
from sluice import keys
from sluice.errors import ShuttingDown, TooManyStreams
from tests.waits import async_wait_until

pytestmark = pytest.mark.asyncio(loop_scope="function")


class Flaky:
    """A client whose XREAD fails while ``failing`` is above 0 (then counts down)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.failing = 0

    def xread(self, *a: Any, **kw: Any) -> Any:
        if self.failing > 0:
            self.failing -= 1

            async def fail() -> None:
                raise RedisConnectionError("connection lost")

            return fail()
        return self.inner.xread(*a, **kw)


def make_hub(**kw: Any) -> tuple[TokenHub, Any, Flaky]:
    server = fakeredis.FakeServer()
    r = fake_aioredis.FakeRedis(server=server, decode_responses=True)
    flaky = Flaky(fake_aioredis.FakeRedis(server=server, decode_responses=True))
    hub = TokenHub(flaky, reads=r, call=RedisGate(1.0, 8), timeout_s=1.0, **kw)  # type: ignore[arg-type]
    hub.readers.clear()
    return hub, r, flaky


async def add(client: Any, job: str, kind: str, **f: str) -> str:
    return str(await client.xadd(keys.stream_key("g", job), {"t": kind, "a": "1", **f}))


async def test_failed_reads_resume_from_the_cursor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gateway.hub_reader.RECONNECT_BASE_S", 0.001)
    hub, r, flaky = make_hub()
    listener = hub.join("g", "g.1")
    got: list[str] = []

    async def follow() -> None:
        async for batch in hub.follow(listener):
            got.extend(eid for eid, _ in batch)

    task = asyncio.create_task(follow())
    await async_wait_until(lambda: "g" in hub.readers, what="the reader")
    ids = [await add(r, "g.1", "start")]
    flaky.failing = 3
    ids += [await add(r, "g.1", "tokens", i=str(i), x="a", ids="[1]") for i in range(5)]
    await async_wait_until(lambda: hub.read_failures >= 3, what="three failed reads")
    ids.append(await add(r, "g.1", "end", r="{}"))
    await asyncio.wait_for(task, 10)
    hub.leave(listener)
    assert got == ids
    await hub.stop()


async def test_a_listener_that_falls_behind_is_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gateway.hub_reader.QUEUE_BATCHES", 2)
    hub, r, _ = make_hub()
    listener = hub.join("g", "g.2")
    hub._watch(listener, keys.stream_key("g", "g.2"), "0-0")
    for i in range(3):
        listener.offer([(f"1-{i}", {"t": "tokens"})])
    assert listener.closed and listener.queue.get_nowait() is None
    await hub.stop()


async def test_the_cap_and_the_shutdown_refuse_new_listeners() -> None:
    hub, _, _ = make_hub(max_listeners=1)
    first = hub.join("g", "g.3")
    with pytest.raises(TooManyStreams):
        hub.join("g", "g.4")
    hub.leave(first)
    assert hub.close() == 0
    with pytest.raises(ShuttingDown):
        hub.join("g", "g.5")
    await hub.stop()
