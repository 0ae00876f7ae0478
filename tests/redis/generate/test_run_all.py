"""QueueClient.run_all: several calls, one pipeline, each call's own reply
(ADR 0146)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
from redis.exceptions import ResponseError

from sluice import keys
from sluice.jobs import NewJob
from sluice.queue import QueueClient
from sluice.queue.client import AsyncQueueClient, connect_async
from sluice.queue.scripts import Call
from tests.conftest import make_config

pytestmark = pytest.mark.redis


def test_each_call_gets_its_own_parsed_reply(r: redis.Redis) -> None:
    qc = QueueClient(r, dict(make_config().models))
    k = keys.stats_key("m")  # any key of the model's slot
    calls: list[Call[Any]] = [
        qc.ops.submit("m", [NewJob("x", "32", 4)]),
        Call(lambda rep: rep, commands=[("HSET", k, "a", 1), ("HGET", k, "a")]),
        qc.ops.claim("m", "w1"),
    ]
    submitted, plain, batch = qc.run_all(calls)
    assert [j.id for j in batch.jobs] == [submitted[0].id]
    assert plain == [1, "1"]
    assert qc.run_all([]) == []


def test_an_error_reply_raises_after_every_call_ran(r: redis.Redis) -> None:
    qc = QueueClient(r, dict(make_config().models))
    r.set(keys.seq_key("m") + ":x", "text")
    calls: list[Call[Any]] = [
        Call(lambda rep: rep, commands=[("INCR", keys.seq_key("m") + ":x")]),
        qc.ops.submit("m", [NewJob("x", "32", 4)]),
    ]
    with pytest.raises(ResponseError, match="not an integer"):
        qc.run_all(calls)
    assert sum(b.queued for b in qc.stats("m").buckets) == 1  # the submit after it ran


def test_the_async_client_runs_the_same_calls(redis_url: str, r: redis.Redis) -> None:
    models = dict(make_config().models)

    async def go() -> list[Any]:
        aq = AsyncQueueClient(connect_async(redis_url), models)
        try:
            await aq.redis.script_flush()  # the scripts are loaded on the way
            return await aq.run_all(
                [aq.ops.submit("m", [NewJob("x", "32", 4)]), aq.ops.claim("m", "w1")]
            )
        finally:
            await aq.redis.aclose()

    submitted, batch = asyncio.run(go())
    assert [j.id for j in batch.jobs] == [submitted[0].id]
