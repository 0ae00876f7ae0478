"""Model event streams (GET /v1/models/{m}/events) through a real uvicorn server on a
real Redis: one shared reader per watched model, fanned out to every viewer, so
open streams never take the connections ordinary requests need (issue 28, item 10)."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import redis

from gateway.app import create_app
from gateway.event_hub import EventHub
from gateway.hub_reader import id_order, next_id
from gateway.metrics import GatewayMetrics
from gateway.redis_io import RedisGate
from gateway.redis_io import connect as connect_gateway
from gateway.state import GatewayState
from sluice import keys
from sluice.jobs import NewJob, Outcome
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.kit.gateway import gateway_config
from tests.kit.served import served
from tests.waits import HUNG_S, async_wait_until

PATH = "/v1/models/m/events"


@contextmanager
def gateway(
    redis_url: str, model: dict[str, Any] | None = None, **gw: Any
) -> Iterator[tuple[str, GatewayState, QueueClient]]:
    app = create_app(gateway_config(gateway=gw, **(model or {})), redis_url)
    q = QueueClient(connect(redis_url), dict(app.state.gateway.cfg.models))
    try:
        with served(app) as port:
            yield f"http://127.0.0.1:{port}", app.state.gateway, q
    finally:
        q.redis.close()


@dataclass
class Viewer:
    """One open stream: its status, then each SSE event as it arrives."""

    headers: dict[str, str] = field(default_factory=dict)
    status: int | None = None
    body: Any = None
    events: list[dict[str, Any]] = field(default_factory=list)
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    ended: bool = False


async def watch(c: httpx.AsyncClient, v: Viewer, last_id: str | None = None) -> None:
    headers = {"Last-Event-ID": last_id} if last_id else {}
    async with c.stream("GET", PATH, headers=headers) as resp:
        v.status, v.headers = resp.status_code, dict(resp.headers)
        if resp.status_code != 200:
            v.body = json.loads(await resp.aread())
            v.opened.set()
            return
        cur: dict[str, Any] = {}
        async for line in resp.aiter_lines():
            if line.startswith("retry:"):
                v.opened.set()
            elif line == "" and "event" in cur:
                v.events.append(cur)
                cur = {}
            elif line.startswith(("id: ", "event: ")):
                name, _, value = line.partition(": ")
                cur[name] = value
            elif line.startswith("data: "):
                cur["data"] = json.loads(line[6:])
    v.ended = True


async def open_viewers(
    c: httpx.AsyncClient, n: int
) -> tuple[list[Viewer], list[asyncio.Task[None]]]:
    viewers = [Viewer() for _ in range(n)]
    tasks = [asyncio.create_task(watch(c, v)) for v in viewers]
    await async_wait_until(lambda: all(v.opened.is_set() for v in viewers), what="streams")
    return viewers, tasks


async def close_all(tasks: list[asyncio.Task[None]]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def end_jobs(q: QueueClient) -> list[str]:
    batch = q.claim("m", "w1")
    assert batch is not None
    q.complete("m", [Outcome.ok(j.id, [1.0]) for j in batch.jobs], "w1")
    return [j.id for j in batch.jobs]


def ended_ids(v: Viewer) -> list[tuple[str, list[str]]]:
    return [(e["id"], [j["id"] for j in e["data"]["jobs"]]) for e in v.events]


async def test_streams_past_the_pool_leave_ordinary_requests_alone(redis_url: str) -> None:
    # 20 streams on a 2-connection gateway: were each to hold a connection in its
    # blocking read (half the 2 s timeout each), a request would queue behind ~9
    # rounds of them, far past its 2 s deadline, and answer 503.
    with gateway(redis_url, redis_max_connections=2, redis_timeout_s=2.0) as (base, st, q):
        async with httpx.AsyncClient(base_url=base, timeout=HUNG_S) as c:
            viewers, tasks = await open_viewers(c, 20)
            try:
                ids = []
                for _ in range(4):
                    resp = await c.post("/v1/models/m/jobs", json={"input": "hi"})
                    assert resp.status_code == 202, resp.text
                    ids.append(resp.json()["id"])
                    assert (await c.get(f"/v1/jobs/{ids[-1]}")).status_code == 200
                assert not any(t.done() for t in tasks)  # answered while every stream is open
                assert st.events.viewers == 20 and st.events.readers == 1
                ended = end_jobs(q)
                await async_wait_until(lambda: all(v.events for v in viewers), what="fan-out")
                assert all(sorted(ended_ids(v)[0][1]) == sorted(ended) for v in viewers)
            finally:
                await close_all(tasks)


async def test_two_viewers_get_the_same_events_and_a_resume_catches_up(redis_url: str) -> None:
    with gateway(redis_url) as (base, st, q):
        async with httpx.AsyncClient(base_url=base, timeout=HUNG_S) as c:
            viewers, tasks = await open_viewers(c, 2)
            for _ in range(3):
                for _ in range(2):
                    await c.post("/v1/models/m/jobs", json={"input": "hi"})
                end_jobs(q)
            await async_wait_until(lambda: all(len(v.events) == 3 for v in viewers))
            a, b = viewers
            assert a.events == b.events and st.events.readers == 1
            # a third resumes after the first event: the rest from Redis, then live
            late = Viewer()
            tasks.append(asyncio.create_task(watch(c, late, a.events[0]["id"])))
            await async_wait_until(lambda: len(late.events) == 2, what="catch-up")
            await c.post("/v1/models/m/jobs", json={"input": "hi"})
            end_jobs(q)
            await async_wait_until(lambda: all(len(v.events) == 4 for v in viewers))
            await async_wait_until(lambda: len(late.events) == 3, what="live after catch-up")
            assert late.events == a.events[1:] and st.events.readers == 1
            await close_all(tasks)


async def test_the_viewer_cap_answers_429_with_retry_after(redis_url: str) -> None:
    with gateway(redis_url, model_events_max_viewers=2) as (base, st, _):
        async with httpx.AsyncClient(base_url=base, timeout=HUNG_S) as c:
            _, tasks = await open_viewers(c, 2)
            over = Viewer()
            await watch(c, over)
            assert over.status == 429 and int(over.headers["retry-after"]) >= 1
            assert over.body["error"]["type"] == "too_many_streams"
            assert "model_events_max_viewers" in over.body["error"]["message"]
            tasks[0].cancel()  # a viewer leaves: its place is free again
            await async_wait_until(lambda: st.events.viewers == 1, what="the leave")
            _, more = await open_viewers(c, 1)
            await close_all(tasks + more)


async def test_the_reader_stops_with_its_last_viewer_and_streams_end_on_shutdown(
    redis_url: str,
) -> None:
    with gateway(redis_url) as (base, st, _):
        async with httpx.AsyncClient(base_url=base, timeout=HUNG_S) as c:
            _, tasks = await open_viewers(c, 2)
            assert st.events.readers == 1
            await close_all(tasks)  # clients disconnect
            await async_wait_until(lambda: st.events.viewers == 0, what="viewers leave")
            await async_wait_until(lambda: st.events.readers == 0, what="the reader stops")
            viewers, tasks = await open_viewers(c, 2)
            loop = st._tasks[0].get_loop()  # the server thread's
            loop.call_soon_threadsafe(st._closing, signal.SIGTERM)  # what SIGTERM does
            await async_wait_until(lambda: all(v.ended for v in viewers), what="streams end")
            refused = Viewer()
            await watch(c, refused)
            assert refused.status == 503 and refused.body["error"]["type"] == "shutting_down"
            await async_wait_until(lambda: st.events.readers == 0, what="the reader stops")
            await close_all(tasks)


async def test_the_reader_survives_a_lost_connection(redis_url: str) -> None:
    with gateway(redis_url) as (base, st, q):
        async with httpx.AsyncClient(base_url=base, timeout=HUNG_S) as c:
            (v,), tasks = await open_viewers(c, 1)
            admin = redis.Redis.from_url(redis_url, decode_responses=True)

            def kill_reader() -> int:
                blocked = [x for x in admin.client_list() if x.get("cmd") == "xread"]
                return sum(admin.client_kill_filter(_id=x["id"]) for x in blocked)

            await async_wait_until(kill_reader, what="the reader's blocking read")
            await c.post("/v1/models/m/jobs", json={"input": "hi"})
            end_jobs(q)
            await async_wait_until(lambda: len(v.events) == 1, what="an event after it")
            assert not tasks[0].done() and st.events.readers == 1
            admin.close()
            await close_all(tasks)


def end_all(q: QueueClient) -> set[str]:
    """Claim and end every queued job of ``m`` (one script call, one entry, per batch)."""
    ended: set[str] = set()
    while batch := q.claim("m", "w1"):
        q.complete("m", [Outcome.ok(j.id, [1.0]) for j in batch.jobs], "w1")
        ended |= {j.id for j in batch.jobs}
    return ended


def job_ids(v: Viewer) -> set[str]:
    return {j for _, ids in ended_ids(v) for j in ids}


def entries(events: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """Each event's jobs, sorted: a catch-up sends partition after partition, live
    events come as they end, so only the set is the same (and never a repeat)."""
    return sorted(tuple(sorted(j["id"] for j in e["data"]["jobs"])) for e in events)


async def test_partitioned_events_arrive_and_resume_from_the_cursor(redis_url: str) -> None:
    with gateway(redis_url, {"queue": {"partitions": 3}}) as (base, st, q):
        async with httpx.AsyncClient(base_url=base, timeout=HUNG_S) as c:
            (a,), tasks = await open_viewers(c, 1)
            assert st.events.readers == 3  # one per partition
            for _ in range(6):  # round-robin: two in each partition
                assert (await c.post("/v1/models/m/jobs", json={"input": "hi"})).status_code == 202
            first = end_all(q)
            assert {keys.partition_of(j) for j in first} == {0, 1, 2}
            await async_wait_until(lambda: job_ids(a) == first, what="every partition's")
            assert all(len(e["id"].split(",")) == 3 for e in a.events)  # the cursor
            # a reconnect with the first event's cursor: the rest, once each, then live
            late = Viewer()
            tasks.append(asyncio.create_task(watch(c, late, a.events[0]["id"])))
            await async_wait_until(lambda: len(late.events) == len(a.events) - 1, what="catch-up")
            await c.post("/v1/models/m/jobs", json={"input": "hi"})
            more = end_all(q)
            await async_wait_until(lambda: job_ids(late) >= more, what="live after catch-up")
            await async_wait_until(lambda: job_ids(a) >= more, what="live")
            assert entries(late.events) == entries(a.events[1:])  # nothing lost or repeated
            # and again from the resumed stream's own last cursor: only what came after
            seen = len(a.events)
            again = Viewer()
            tasks.append(asyncio.create_task(watch(c, again, late.events[-1]["id"])))
            await c.post("/v1/models/m/jobs", json={"input": "hi"})
            newest = end_all(q)
            await async_wait_until(lambda: job_ids(again) == newest, what="the second resume")
            await async_wait_until(lambda: job_ids(a) >= newest, what="live")
            assert entries(again.events) == entries(a.events[seen:])
            # an id from before partitions (one stream id) still resumes: every partition
            old = Viewer()
            tasks.append(asyncio.create_task(watch(c, old, "0-0")))
            every = first | more | newest
            await async_wait_until(lambda: job_ids(old) == every, what="a plain id")
            assert entries(old.events) == entries(a.events)
            await close_all(tasks)


async def test_a_partition_added_while_streaming_is_caught_up(redis_url: str) -> None:
    with gateway(redis_url, {"queue": {"partitions": 3}}) as (base, st, q):
        async with httpx.AsyncClient(base_url=base, timeout=HUNG_S) as c:
            (a,), tasks = await open_viewers(c, 1)
            st.queue.ops.parts.high_water["m"] = 4  # what a raised count's refresh reads
            q.ops.parts.high_water["m"] = 4
            in_new = q.submit("m", [NewJob(input="x", bucket="32", cost=1)], partition=3)
            assert keys.partition_of(in_new[0].id) == 3
            ended = end_all(q)  # ends it before the viewer follows partition 3
            await c.post("/v1/models/m/jobs", json={"input": "hi"})
            ended |= end_all(q)  # an event of a followed partition: the viewer grows
            await async_wait_until(lambda: job_ids(a) == ended, what="the new partition's")
            assert len(a.events[-1]["id"].split(",")) == 4 and st.events.readers == 4
            await close_all(tasks)


@pytest.mark.parametrize(
    ("entry_id", "after"),
    [
        ("0-0", "0-1"),
        ("1700000000000-5", "1700000000000-6"),
        (f"7-{2**64 - 1}", "8-0"),  # the sequence is full: the next millisecond
    ],
)
def test_the_catch_up_starts_just_after_the_last_id_sent(entry_id: str, after: str) -> None:
    assert next_id(entry_id) == after
    assert id_order(after) > id_order(entry_id)


async def test_a_reader_without_redis_backs_off_and_stops_with_its_viewer() -> None:
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = connect_gateway(f"redis://127.0.0.1:{port}/0", 0.5)
    hub = EventHub(
        dead,
        reads=dead,
        call=RedisGate(0.5, 4),
        max_viewers=4,
        timeout_s=0.5,
        metrics=GatewayMetrics(),
    )
    viewer = hub.join("m")
    await async_wait_until(lambda: hub.read_failures >= 3, what="failed reads")
    # every failure was followed by a backoff sleep (half its ceiling at least): no spin
    assert viewer.reader.retry.backoff.attempt == hub.read_failures
    assert viewer.reader.retry.down and hub.readers == 1 and not viewer.closed
    hub.leave(viewer)
    await async_wait_until(lambda: hub.readers == 0, what="the reader stops")
    await hub.stop()
    await dead.aclose()


class _Broken:
    """A readers' client with a bug: every read raises something that is not Redis's."""

    async def xrevrange(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError("a bug in the reader")

    async def aclose(self) -> None:
        return None


async def test_a_reader_that_fails_ends_a_resuming_viewer_at_once() -> None:
    hub = EventHub(
        _Broken(),  # type: ignore[arg-type]
        reads=_Broken(),  # type: ignore[arg-type]
        call=RedisGate(0.5, 4),
        max_viewers=4,
        timeout_s=0.5,
        metrics=GatewayMetrics(),
    )
    hub.keepalive_s = 3600.0  # a viewer left waiting for the cursor would hang the test
    viewer = hub.join("m")
    pages = [page async for page in hub.follow(viewer, "1-0")]  # resuming from an id
    assert pages == [] and viewer.reader.task.done()
    assert viewer.reader.task.exception() is None  # logged, not left unretrieved
    await hub.stop()
