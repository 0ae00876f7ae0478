"""The asyncio client runs the same calls as the sync one (the gateway's path)."""

from __future__ import annotations

import asyncio

import pytest

from sluice.jobs import JobStatus, NewJob, Outcome
from sluice.queue import AsyncQueueClient
from sluice.queue.client import connect_async
from tests.conftest import make_config

pytestmark = pytest.mark.redis


async def test_async_submit_get_cancel_and_wake(redis_url: str) -> None:
    models = dict(make_config().models)
    aq = AsyncQueueClient(connect_async(redis_url), models)
    try:
        waiter = asyncio.create_task(aq.wait_for_work("m", 2.0))
        await asyncio.sleep(0.05)
        [sub] = await aq.submit("m", [NewJob(input="hi", bucket="32", cost=2)])
        assert await asyncio.wait_for(waiter, 1.5) is True  # woken by the submit
        assert (await aq.get(sub.id)).status is JobStatus.QUEUED
        batch = await aq.claim("m", "w")
        assert [j.id for j in batch.jobs] == [sub.id]
        assert await aq.complete("m", [Outcome.ok(sub.id, 1)], worker_id="w") == (1, 0)
        assert (await aq.get(sub.id)).result == 1
        [other] = await aq.submit("m", [NewJob(input="x", bucket="32", cost=1)])
        assert await aq.cancel(other.id) == "queued"
        stats = await aq.stats("m")
        assert stats.counters["succeeded"] == 1 and stats.counters["cancelled"] == 1
        # The cancelled job's token is stale: an empty claim drops it, then the
        # wait times out instead of waking for nothing.
        assert len(await aq.claim("m", "w")) == 0
        assert await aq.wait_for_work("m", 0.1) is False
    finally:
        await aq.redis.aclose()
