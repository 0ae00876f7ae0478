"""The gateway's token hub on a real Redis: many listeners of many jobs fed by one
blocking reader per model, each getting every entry once and in order, also
across a Redis connection loss (streams keep entries; the reader resumes from its
cursors)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from gateway.redis_io import RedisGate, connect
from gateway.token_hub import Entry, Listener, TokenHub
from sluice import keys
from sluice.records import StreamEvent, StreamField
from tests.waits import async_wait_until

pytestmark = pytest.mark.asyncio(loop_scope="function")
JOBS = 40
LISTENERS_PER_JOB = 3
TOKENS = 20


@pytest_asyncio.fixture(loop_scope="function")
async def hub(redis_url: str) -> AsyncIterator[TokenHub]:
    blocking = connect(redis_url, 2.0)
    pool = connect(redis_url, 2.0)
    h = TokenHub(blocking, reads=pool, call=RedisGate(2.0, 64), timeout_s=2.0)
    try:
        yield h
    finally:
        await h.stop()
        await blocking.aclose()
        await pool.aclose()


def fields_of(kind: StreamEvent, **f: str) -> dict[str, str]:
    fields = {StreamField.TYPE.value: kind.value, StreamField.ATTEMPT.value: "1"}
    fields.update({StreamField(k).value: v for k, v in f.items()})
    return fields


async def write(w: aioredis.Redis, job_id: str, kind: StreamEvent, **f: str) -> None:
    await w.xadd(keys.stream_key("g", job_id), fields_of(kind, **f))  # type: ignore[arg-type]


async def step(w: aioredis.Redis, job_ids: list[str], kind: StreamEvent, **f: str) -> None:
    """One entry for every job at once (MULTI/EXEC), as a decode step's script does."""
    pipe = w.pipeline(transaction=True)
    for job_id in job_ids:
        pipe.xadd(keys.stream_key("g", job_id), fields_of(kind, **f))  # type: ignore[arg-type]
    await pipe.execute()


async def produce(w: aioredis.Redis, job_ids: list[str], pause: asyncio.Event | None) -> None:
    """Every job's start, TOKENS token entries (a step writes all jobs'), then end."""
    await step(w, job_ids, StreamEvent.START)
    for i in range(TOKENS):
        if pause is not None and i == TOKENS // 2:
            await pause.wait()
        await step(w, job_ids, StreamEvent.TOKENS, i=str(i), ids=json.dumps([i]), x=f"{i},")
    await step(w, job_ids, StreamEvent.END, r=json.dumps({"text": "done"}))


async def collect(hub: TokenHub, listener: Listener) -> list[Entry]:
    got: list[Entry] = []
    try:
        async for batch in hub.follow(listener):
            got += batch
    finally:
        hub.leave(listener)
    return got


def check(got: list[Entry]) -> None:
    kinds = [f[StreamField.TYPE] for _, f in got]
    assert kinds == ["start"] + ["tokens"] * TOKENS + ["end"]
    assert [int(f[StreamField.INDEX]) for _, f in got[1:-1]] == list(range(TOKENS))
    ids = [eid for eid, _ in got]
    assert len(set(ids)) == len(ids)


async def test_many_listeners_of_many_jobs_share_one_reader(hub: TokenHub, redis_url: str) -> None:
    w = connect(redis_url, 2.0)
    job_ids = [f"g.job{i}" for i in range(JOBS)]
    listeners = [hub.join("g", j) for j in job_ids for _ in range(LISTENERS_PER_JOB)]
    tasks = [asyncio.create_task(collect(hub, lst)) for lst in listeners]
    await async_wait_until(lambda: len(hub.readers.get("g", _no).streams) == JOBS, what="all")
    reader = hub.readers["g"]
    before = reader.reads
    try:
        await produce(w, job_ids, None)
        results = await asyncio.wait_for(asyncio.gather(*tasks), 30)
    finally:
        await w.aclose()
    for got in results:
        check(got)
    # One XREAD serves every followed stream: a read per step, not per entry (a
    # quarter of the entries leaves room for idle block timeouts on a busy machine).
    assert reader.reads - before < JOBS * (TOKENS + 2) / 4
    await async_wait_until(lambda: reader.task is not None and reader.task.done(), what="stop")
    assert hub.listeners == 0 and not reader.streams


async def test_a_lost_connection_loses_no_entry(hub: TokenHub, redis_url: str) -> None:
    w = connect(redis_url, 2.0)
    job_ids = [f"g.job{i}" for i in range(5)]
    tasks = [asyncio.create_task(collect(hub, hub.join("g", j))) for j in job_ids]
    pause = asyncio.Event()
    producer = asyncio.create_task(produce(w, job_ids, pause))
    try:
        await async_wait_until(lambda: len(hub.readers.get("g", _no).streams) == 5, what="all")
        await async_wait_until(lambda: hub.readers["g"].reads > 2, what="reads")
        blocked = await async_wait_until(lambda: blocked_reader(w), what="the blocked XREAD")
        await w.execute_command("CLIENT", "KILL", "ID", blocked)  # the reader's connection
        pause.set()
        await producer
        results = await asyncio.wait_for(asyncio.gather(*tasks), 30)
    finally:
        await w.aclose()
    for got in results:
        check(got)


async def blocked_reader(w: aioredis.Redis) -> str | None:
    """The id of the client blocked in XREAD (the hub's reader), if it is now."""
    for client in await w.client_list():
        if client.get("cmd") == "xread" and "b" in client.get("flags", ""):
            return str(client["id"])
    return None


async def test_a_late_listener_catches_up_and_then_follows_live(
    hub: TokenHub, redis_url: str
) -> None:
    w = connect(redis_url, 2.0)
    try:
        await write(w, "g.late", StreamEvent.START)
        await write(w, "g.late", StreamEvent.TOKENS, i="0", ids="[0]", x="0,")
        first = hub.join("g", "g.late")
        early = asyncio.create_task(collect(hub, first))
        await async_wait_until(lambda: "g" in hub.readers and hub.readers["g"].streams, what="in")
        for i in range(1, TOKENS):
            await write(w, "g.late", StreamEvent.TOKENS, i=str(i), ids=f"[{i}]", x=f"{i},")
        second = asyncio.create_task(collect(hub, hub.join("g", "g.late")))
        await async_wait_until(lambda: hub.listeners == 2, what="both")
        await write(w, "g.late", StreamEvent.END, r="{}")
        a, b = await asyncio.wait_for(asyncio.gather(early, second), 30)
    finally:
        await w.aclose()
    check(a)
    assert a == b


class _NoReader:
    streams: dict[str, object] = {}


_no = _NoReader()
