"""One pipelined Redis round trip per dashboard refresh (for every model at once);
a second one only when a dead letter appears that the feed has not seen."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.dashboard.feed import DashboardFeed
from gateway.redis_io import RedisGate
from sluice.jobs import NewJob, Outcome
from sluice.queue import AsyncQueueClient
from tests.conftest import make_config

pytestmark = [pytest.mark.redis, pytest.mark.asyncio(loop_scope="function")]


class CountingRedis(aioredis.Redis):
    """Counts round trips: single commands and pipeline flushes."""

    trips = 0

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        CountingRedis.trips += 1
        return await super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        original = pipe.execute

        async def execute(raise_on_error: bool = True) -> Any:
            CountingRedis.trips += 1
            return await original(raise_on_error)

        pipe.execute = execute  # type: ignore[method-assign]
        return pipe


async def test_a_refresh_is_one_round_trip_for_all_models(redis_url: str) -> None:
    cfg = make_config()
    models = {"m": cfg.models["m"], "other": cfg.models["m"]}
    r = CountingRedis.from_url(redis_url, decode_responses=True)
    q = AsyncQueueClient(r, models)
    feed = DashboardFeed(r, models, RedisGate(2.0, 8), cache=False)
    try:
        await q.submit("m", [NewJob(input="a", bucket="32", cost=1) for _ in range(3)])
        batch = await q.claim("m", "w", max_batch=1)
        await q.complete("m", [Outcome.fail(batch.jobs[0].id, "boom", "it broke")])

        CountingRedis.trips = 0
        first = await feed.get()
        assert CountingRedis.trips == 2  # the read, then the new dead letter's error
        assert first["models"][0]["dead_letters"]["recent"][0]["message"] == "it broke"

        CountingRedis.trips = 0
        second = await feed.get()
        assert CountingRedis.trips == 1  # the dead letter is known: its error is kept
        assert second["models"][0]["dead_letters"]["recent"][0]["message"] == "it broke"
        assert [m["name"] for m in second["models"]] == ["m", "other"]
        assert second["models"][0]["queued"] == 2
    finally:
        await r.aclose()
