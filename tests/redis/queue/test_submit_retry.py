"""A submit call run twice (redis-py retries a script whose reply was lost) is one job."""

from __future__ import annotations

import pytest
import redis

from sluice import keys
from sluice.errors import LeaseLost
from sluice.jobs import NewJob, Owner
from sluice.queue import QueueClient

pytestmark = pytest.mark.redis


def test_the_same_submit_call_run_twice_queues_and_counts_once(
    queue_factory, r: redis.Redis
) -> None:
    q: QueueClient = queue_factory()
    owner = Owner("team-a", max_unfinished=10)
    jobs = [NewJob(input=f"text {i}", bucket="32", cost=4) for i in range(3)]
    call = q.ops.submit("m", jobs, owner=owner)
    first = q.run(call)
    again = q.run(call)  # what a retry after a timed-out reply sends: the same ids
    assert [s.id for s in again] == [s.id for s in first]
    assert all(s.created for s in first) and not any(s.created for s in again)
    stats = q.stats("m")
    assert stats.counters["arrived"] == 3
    assert stats.counters["arrived_cost"] == 12 and stats.counters["queued_cost"] == 12
    assert stats.queued == 3
    assert int(r.hget(keys.owner_jobs_key("m"), "team-a") or 0) == 3
    batch = q.claim("m", "w1")
    assert sorted(j.id for j in batch.jobs) == sorted(s.id for s in first)


def test_a_fenced_submit_writes_nothing_unless_the_fence_holds_its_token(
    queue_factory, r: redis.Redis
) -> None:
    q: QueueClient = queue_factory()
    fence = keys.bulk_key("m", "m.bulk1")
    r.hset(fence, "token", "mine")
    jobs = [NewJob(input="text", bucket="32", cost=4)]
    with pytest.raises(LeaseLost):
        q.submit("m", jobs, fence=(fence, "stale"))
    assert q.stats("m").queued == 0 and "arrived" not in q.stats("m").counters
    r.delete(fence)  # a bulk job that ended: no token at all
    with pytest.raises(LeaseLost):
        q.submit("m", jobs, fence=(fence, "mine"))
    r.hset(fence, "token", "mine")
    assert [s.created for s in q.submit("m", jobs, fence=(fence, "mine"))] == [True]
    assert q.stats("m").queued == 1
