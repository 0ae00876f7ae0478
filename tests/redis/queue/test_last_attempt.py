"""A job's last attempt never goes to the worker that failed its previous one while
another serving worker of its bucket is live (ADR 0166), on a real redis-server: the
claim script decides it from the registry, so which worker claims first is moot."""

from __future__ import annotations

import time

import pytest
import redis

from sluice import keys, registry
from sluice.jobs import JobStatus, NewJob, Outcome
from sluice.queue import QueueClient
from sluice.records import JobField
from tests.factories import worker_info
from tests.waits import wait_until

pytestmark = pytest.mark.redis
# Retries go straight back (no backoff): what is under test is who takes them.
AT_ONCE = {"backoff_ms": 0}
BROKEN, HEALTHY = "w-broken", "w-healthy"


def register(r: redis.Redis, wid: str, buckets: list[str], **kw: object) -> None:
    info = worker_info(id=wid, model="m", buckets=buckets, started_at=time.time(), **kw)
    for cmd in registry.heartbeat(info, 30):
        r.execute_command(*cmd)


def fail_twice(q: QueueClient, job_id: str) -> None:
    """Two attempts of ``job_id`` on BROKEN, each retried: the next one is its last."""
    for attempt in (1, 2):
        [job] = q.claim("m", BROKEN).jobs
        assert (job.id, job.attempts) == (job_id, attempt)
        q.complete("m", [Outcome.retry(job_id, "worker_error", "device lost")], BROKEN)


def jobs(q: QueueClient, n: int, bucket: str = "32") -> list[str]:
    return [s.id for s in q.submit("m", [NewJob(input="x", bucket=bucket, cost=4)] * n)]


def one_job(q: QueueClient, bucket: str = "32") -> str:
    return jobs(q, 1, bucket)[0]


def test_the_failed_worker_leaves_the_last_attempt_and_the_other_worker_takes_it(
    r: redis.Redis, queue_factory
) -> None:
    q = queue_factory(retry=AT_ONCE)
    register(r, BROKEN, ["32", "128", "512"])
    register(r, HEALTHY, ["32", "128", "512"])
    job = one_job(q)
    fail_twice(q, job)
    r.delete(keys.wake_key("m", "32"))
    assert q.claim("m", BROKEN).jobs == []  # left in its place, however often it asks
    assert q.claim("m", BROKEN).jobs == []
    rec = r.hgetall(keys.job_key("m", job))
    assert rec[JobField.STATUS] == "queued" and rec[JobField.LAST_WORKER] == BROKEN
    assert r.zrange(keys.queue_key("m", "32"), 0, -1) == [job]
    assert r.llen(keys.wake_key("m", "32")) == 1  # the first leave woke the bucket, once
    [taken] = q.claim("m", HEALTHY).jobs
    assert (taken.id, taken.attempts) == (job, 3)
    q.complete("m", [Outcome.ok(job, {"ok": 1})], HEALTHY)
    assert q.get(job).status is JobStatus.SUCCEEDED and q.dead_letters("m") == []


def test_a_lone_worker_still_runs_the_last_attempt_and_dead_letters_it(
    r: redis.Redis, queue_factory
) -> None:
    # Beside it: a worker of other buckets only, a parked one, and none whose
    # heartbeat is live. None can take the job, so it is not left for them.
    q = queue_factory(retry=AT_ONCE)
    register(r, BROKEN, ["32"])
    register(r, "w-big", ["128", "512"])
    register(r, "w-parked", ["32"], parked=True)
    r.zadd(keys.workers_key("m"), {"w-gone": 1.0})  # lapsed long ago
    r.hset(keys.workers_info_key("m"), "w-gone", worker_info(id="w-gone").to_json())
    job = one_job(q)
    fail_twice(q, job)
    [last] = q.claim("m", BROKEN).jobs
    assert (last.id, last.attempts) == (job, 3)
    q.complete("m", [Outcome.retry(job, "worker_error", "device lost")], BROKEN)
    rec = q.get(job)
    assert rec.status is JobStatus.FAILED and q.dead_letters("m") == [job]


def test_a_job_left_for_a_worker_that_never_claims_is_taken_after_a_lease(
    r: redis.Redis, queue_factory
) -> None:
    # The other worker heartbeats but never claims: after a lease's time the job is
    # the failed worker's again (nothing is stranded).
    q = queue_factory(retry=AT_ONCE, batching={"lease_s": 0.3})
    register(r, BROKEN, ["32"])
    register(r, HEALTHY, ["32"])
    job = one_job(q)
    fail_twice(q, job)
    left_at = time.monotonic()
    assert q.claim("m", BROKEN).jobs == []
    got = wait_until(lambda: q.claim("m", BROKEN).jobs, 10, "it to take it", every_s=0.02)
    assert [(j.id, j.attempts) for j in got] == [(job, 3)]
    assert time.monotonic() - left_at >= 0.3


def test_a_bucket_holding_only_a_left_job_does_not_idle_the_failed_worker(
    r: redis.Redis, queue_factory
) -> None:
    q = queue_factory(retry=AT_ONCE)
    register(r, BROKEN, ["32", "128", "512"])
    register(r, HEALTHY, ["32", "128", "512"])
    job = one_job(q, "32")
    fail_twice(q, job)
    other = one_job(q, "128")  # newer: the left job's bucket is the pick's first choice
    batch = q.claim("m", BROKEN)
    assert [j.id for j in batch.jobs] == [other] and batch.bucket == "128"
    assert r.zrange(keys.queue_key("m", "32"), 0, -1) == [job]
    assert q.stats("m").queued == 1 and q.stats("m").queued_cost == 4
    [taken] = q.claim("m", HEALTHY).jobs
    assert (taken.id, taken.attempts) == (job, 3)


def test_left_jobs_stay_in_place_and_the_claim_takes_the_jobs_behind_them(
    r: redis.Redis, queue_factory
) -> None:
    q = queue_factory(retry=AT_ONCE)
    register(r, BROKEN, ["32"])
    register(r, HEALTHY, ["32"])
    first = jobs(q, 3)
    for attempt in (1, 2):  # three jobs, each failed twice by BROKEN
        batch = q.claim("m", BROKEN, max_batch=3)
        assert sorted(j.id for j in batch.jobs) == sorted(first)
        assert {j.attempts for j in batch.jobs} == {attempt}
        q.complete("m", [Outcome.retry(i, "worker_error", "x") for i in first], BROKEN)
    later = jobs(q, 12)
    batch = q.claim("m", BROKEN, max_batch=4)
    assert [j.id for j in batch.jobs] == later[:4]  # past the three left at the front
    assert r.zrange(keys.queue_key("m", "32"), 0, 2) == first
    batch = q.claim("m", HEALTHY, max_batch=4)
    assert [j.id for j in batch.jobs] == [*first, later[4]]
