"""Job reads of one event-loop turn share one round trip, each with its own answer."""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis.aioredis

from gateway.read_batch import ReadBatch
from gateway.redis_io import RedisGate
from sluice.errors import JobNotFound, RedisUnavailable
from sluice.queue.scripts import Call


def _hget(key: str) -> Call[str]:
    def parse(replies: list[Any]) -> str:
        if replies[0] is None:
            raise JobNotFound(key)
        return str(replies[0])

    return Call(parse, commands=[("HGET", key, "status")])


class _Counting(fakeredis.aioredis.FakeRedis):
    pipelines = 0

    def pipeline(self, *a: Any, **kw: Any) -> Any:
        _Counting.pipelines += 1
        return super().pipeline(*a, **kw)


def test_one_turn_one_round_trip_each_its_own_answer() -> None:
    async def go() -> list[Any]:
        r = _Counting(decode_responses=True)
        await r.hset("a", "status", "succeeded")
        await r.hset("b", "status", "queued")
        reads = ReadBatch(r, RedisGate(2.0, 8))
        _Counting.pipelines = 0
        calls = [reads.read(_hget(k)) for k in ("a", "gone", "b")]
        return [*await asyncio.gather(*calls, return_exceptions=True), _Counting.pipelines]

    a, gone, b, pipelines = asyncio.run(go())
    assert (a, b, pipelines) == ("succeeded", "queued", 1)
    assert isinstance(gone, JobNotFound)


def test_a_failed_round_trip_fails_its_reads_and_the_next_one_works() -> None:
    class Broken(fakeredis.aioredis.FakeRedis):
        broken = True

        def pipeline(self, *a: Any, **kw: Any) -> Any:
            if Broken.broken:
                raise ConnectionError("down")
            return super().pipeline(*a, **kw)

    async def go() -> tuple[Any, str]:
        r = Broken(decode_responses=True)
        await r.hset("a", "status", "running")
        reads = ReadBatch(r, RedisGate(2.0, 8))
        first = await asyncio.gather(reads.read(_hget("a")), return_exceptions=True)
        Broken.broken = False
        return first[0], await reads.read(_hget("a"))

    err, ok = asyncio.run(go())
    assert isinstance(err, RedisUnavailable) and ok == "running"


def test_a_cancelled_reader_does_not_stop_the_others() -> None:
    async def go() -> str:
        r = fakeredis.aioredis.FakeRedis(decode_responses=True)
        await r.hset("a", "status", "failed")
        reads = ReadBatch(r, RedisGate(2.0, 8))
        doomed = asyncio.ensure_future(reads.read(_hget("a")))
        kept = asyncio.ensure_future(reads.read(_hget("a")))
        await asyncio.sleep(0)
        doomed.cancel()
        return await kept

    assert asyncio.run(go()) == "failed"


def test_one_batcher_serves_one_event_loop_after_another() -> None:
    r = fakeredis.aioredis.FakeRedis(decode_responses=True)
    reads = ReadBatch(r, RedisGate(2.0, 8))

    async def go() -> str:
        await r.hset("a", "status", "queued")
        return await reads.read(_hget("a"))

    assert [asyncio.run(go()) for _ in range(2)] == ["queued", "queued"]
