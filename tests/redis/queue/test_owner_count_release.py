"""The per-owner unfinished-job counter on the paths the fuzz in
tests/redis/security/test_owner_queue.py does not take (claim's malformed-record check,
reclaim dead-lettering on the last attempt)."""

from __future__ import annotations

import redis

from sluice import keys
from sluice.jobs import JobStatus, NewJob, Outcome, Owner
from sluice.queue import QueueClient


def _count(r: redis.Redis, owner: str) -> int:
    return int(r.hget(keys.owner_jobs_key("m"), owner) or 0)


def test_malformed_records_and_reclaimed_dead_letters_release_their_owner(
    queue_factory, r: redis.Redis
) -> None:
    q: QueueClient = queue_factory(batching={"max_attempts": 1})
    subs = q.submit("m", [NewJob("x", "32", 4) for _ in range(4)], owner=Owner("a"))
    assert _count(r, "a") == 4
    r.hset(keys.job_key("m", subs[0].id), "cost", "not-a-number")
    r.hdel(keys.job_key("m", subs[1].id), "input")
    batch = q.claim("m", "w", max_batch=4)
    assert [j.id for j in batch.jobs] == [subs[2].id, subs[3].id]
    assert q.get(subs[0].id).status == q.get(subs[1].id).status == JobStatus.FAILED
    assert _count(r, "a") == 2  # the two malformed ones ended, once each
    r.zadd(keys.inflight_key("m"), {subs[2].id: 0})  # its lease lapses on its last attempt
    assert q.reclaim("m") == 1
    assert q.get(subs[2].id).status == JobStatus.FAILED
    assert _count(r, "a") == 1
    q.complete("m", [Outcome.ok(subs[3].id, 1), Outcome.ok(subs[2].id, 1)], "w")
    assert r.hget(keys.owner_jobs_key("m"), "a") is None  # no job left, none counted twice
