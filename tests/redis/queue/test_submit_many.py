"""One submit call carrying many requests (ADR 0161): each is admitted, refused or
replayed as if sent alone after the ones before it, and only the admitted ones
write anything."""

from __future__ import annotations

import pytest
import redis

from sluice import keys
from sluice.errors import IdempotencyKeyReused, QueueFull
from sluice.jobs import NewJob, Owner
from sluice.queue import QueueClient

pytestmark = pytest.mark.redis


def _job(key: str | None = None, body: str = "a") -> NewJob:
    return NewJob(
        input=body, bucket="32", cost=2, idempotency_key=key, request_hash=body if key else ""
    )


def test_mixed_admitted_refused_and_replayed_requests_in_one_call(
    queue_factory, r: redis.Redis
) -> None:
    q: QueueClient = queue_factory()
    owner = Owner("team", max_unfinished=3)
    [first] = q.submit("m", [_job("k1")], owner=owner)  # the key's job, from body "a"
    requests = [
        [_job("k1")],  # the same key and body: its job, replayed
        [_job("k1", "b")],  # the same key, another body: refused
        [_job()],  # admitted: the key's second unfinished job
        [_job(), _job()],  # 2 + 2 over the key's 3: refused, whole
        [_job("k2")],  # admitted: the third
        [_job("k2")],  # the job the request before made in this same call
        [_job()],  # 3 + 1: refused, counting the admitted ones before it
    ]
    out = q.run(q.ops.submit_many("m", requests, owner=owner))
    replay, reused, one, two, k2, k2_again, late = out
    assert [(s.id, s.created) for s in replay] == [(first.id, False)]  # type: ignore[union-attr]
    assert isinstance(reused, IdempotencyKeyReused) and reused.index == 0
    assert isinstance(two, QueueFull) and (two.reason, two.queued) == ("owner_jobs", 2)
    assert isinstance(late, QueueFull) and (late.reason, late.queued) == ("owner_jobs", 3)
    made = [one[0], k2[0]]  # type: ignore[index]
    assert all(s.created for s in made)
    assert [(s.id, s.created) for s in k2_again] == [(k2[0].id, False)]  # type: ignore[index, union-attr]
    # Only the admitted requests wrote: two jobs, counted once each, in arrival order.
    assert int(r.hget(keys.owner_jobs_key("m"), "team") or 0) == 3
    stats = q.stats("m")
    assert stats.queued == 3 and stats.counters["arrived"] == 3
    assert stats.counters["queued_cost"] == 6
    batch = q.claim("m", "w1", max_batch=8)
    assert [j.id for j in batch.jobs] == [first.id, *(s.id for s in made)]
