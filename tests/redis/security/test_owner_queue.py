"""Per-API-key ownership in the queue scripts: cap, rate limit, counter, namespaces."""

from __future__ import annotations

import random
import time

import pytest
import redis

from sluice import keys
from sluice.errors import JobNotFound, QueueFull, RateLimited
from sluice.jobs import JobStatus, NewJob, Outcome, Owner
from sluice.queue import QueueClient


def _job(key: str | None = None, deadline_ms: int | None = None) -> NewJob:
    return NewJob("x", "32", 4, idempotency_key=key, deadline_ms=deadline_ms)


def test_owner_is_stored_and_counted_until_the_job_ends(queue_factory, r: redis.Redis) -> None:
    q: QueueClient = queue_factory()
    alice = Owner("alice")
    [sub] = q.submit("m", [_job()], owner=alice)
    assert q.get(sub.id).owner == "alice"
    assert r.hget(keys.owner_jobs_key("m"), "alice") == "1"
    batch = q.claim("m", "w")
    assert r.hget(keys.owner_jobs_key("m"), "alice") == "1"  # running still counts
    q.complete("m", [Outcome.ok(batch.jobs[0].id, 1)], "w")
    assert r.hget(keys.owner_jobs_key("m"), "alice") is None


def test_open_submits_have_no_owner_and_no_counter(queue_factory, r: redis.Redis) -> None:
    q: QueueClient = queue_factory()
    [sub] = q.submit("m", [_job()])
    assert q.get(sub.id).owner is None
    assert r.exists(keys.owner_jobs_key("m"), keys.rate_limit_key("m")) == 0


def test_cap_on_unfinished_jobs_refuses_the_whole_call(queue_factory) -> None:
    q: QueueClient = queue_factory()
    capped = Owner("bob", max_unfinished=3)
    q.submit("m", [_job(), _job()], owner=capped)
    with pytest.raises(QueueFull) as e:
        q.submit("m", [_job(), _job()], owner=capped)
    assert e.value.reason == "owner_jobs" and e.value.queued == 2
    q.submit("m", [_job()], owner=capped)  # exactly at the cap is fine
    q.submit("m", [_job(), _job()], owner=Owner("carol", max_unfinished=3))  # others unaffected
    assert q.stats("m").queued == 5


def test_rate_limit_refuses_with_the_time_until_enough_tokens(queue_factory) -> None:
    q: QueueClient = queue_factory()
    limited = Owner("dave", rate_per_s=2, burst=3)
    q.submit("m", [_job(), _job(), _job()], owner=limited)  # the whole burst
    with pytest.raises(RateLimited) as e:
        q.submit("m", [_job()], owner=limited)
    # One token refills in 1/2 s; a little of it may already be there.
    wait_s = e.value.retry_after_s or 0.0
    assert 0.2 < wait_s <= 0.5
    time.sleep(wait_s + 0.02)
    q.submit("m", [_job()], owner=limited)
    assert q.stats("m").queued == 4


def test_refused_calls_and_replays_take_no_tokens(queue_factory) -> None:
    q: QueueClient = queue_factory()
    o = Owner("erin", max_unfinished=1, rate_per_s=0.5, burst=2)
    [first] = q.submit("m", [_job("k")], owner=o)
    with pytest.raises(QueueFull):
        q.submit("m", [_job()], owner=o)  # over the cap: no token taken
    assert q.submit("m", [_job("k")], owner=o)[0].id == first.id  # a replay: free
    q.complete("m", [Outcome.ok(q.claim("m", "w").jobs[0].id, 1)], "w")
    q.submit("m", [_job()], owner=o)  # the second token is still there
    q.complete("m", [Outcome.ok(q.claim("m", "w").jobs[0].id, 1)], "w")
    with pytest.raises(RateLimited):
        q.submit("m", [_job()], owner=o)


def test_a_batch_over_the_burst_passes_once_then_waits_out_its_debt(queue_factory) -> None:
    q: QueueClient = queue_factory()
    o = Owner("fay", rate_per_s=1, burst=2)
    q.submit("m", [_job() for _ in range(5)], owner=o)
    with pytest.raises(RateLimited) as e:
        q.submit("m", [_job()], owner=o)
    assert 3.0 < (e.value.retry_after_s or 0.0) <= 4.0  # 3 tokens of debt + 1 needed, at 1/s


def test_idempotency_keys_are_namespaced_per_owner(queue_factory) -> None:
    q: QueueClient = queue_factory()
    [a] = q.submit("m", [_job("same")], owner=Owner("a"))
    [b] = q.submit("m", [_job("same")], owner=Owner("b"))
    [open_] = q.submit("m", [_job("same")])
    assert len({a.id, b.id, open_.id}) == 3 and a.created and b.created and open_.created
    assert q.submit("m", [_job("same")], owner=Owner("b"))[0].id == b.id


def test_cancel_of_another_owners_job_is_not_found(queue_factory) -> None:
    q: QueueClient = queue_factory()
    [sub] = q.submit("m", [_job()], owner=Owner("a"))
    with pytest.raises(JobNotFound):
        q.cancel(sub.id, "b")
    assert q.get(sub.id).status == JobStatus.QUEUED
    assert q.cancel(sub.id, "a") == "queued"


# -- the counter never drifts ---------------------------------------------------
OWNERS = ("a", "b", "c")


def _unfinished_by_owner(q: QueueClient, ids: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for job_id in set(ids):  # a replayed idempotency key lists its job twice
        try:
            rec = q.get(job_id)
        except JobNotFound:
            continue
        if not rec.status.terminal and rec.owner:
            out[rec.owner] = out.get(rec.owner, 0) + 1
    return out


def _step(q: QueueClient, rng: random.Random, ids: list[str], held: list[str]) -> None:
    op = rng.choice(
        [
            "submit",
            "submit",
            "claim",
            "ok",
            "retry",
            "fail",
            "release",
            "cancel",
            "lapse",
            "reclaim",
        ]
    )
    if op == "submit":
        owner = Owner(rng.choice(OWNERS), max_unfinished=rng.choice([0, 6]))
        deadline = rng.choice([None, None, 1])  # a 1 ms deadline expires at claim
        jobs = [_job(rng.choice([None, "k1", "k2"]), deadline) for _ in range(rng.randint(1, 3))]
        try:
            ids += [s.id for s in q.submit("m", jobs, owner=owner)]
        except QueueFull:
            pass
    elif op == "claim":
        held += [j.id for j in q.claim("m", "w", max_batch=rng.randint(1, 4)).jobs]
    elif op in ("ok", "retry", "fail", "release") and held:
        job_id = held.pop(rng.randrange(len(held)))
        outcome = {
            "ok": Outcome.ok(job_id, 1),
            "release": Outcome.release(job_id),
            "retry": Outcome.retry(job_id, "e", "boom"),
            "fail": Outcome.fail(job_id, "e", "boom"),
        }[op]
        q.complete("m", [outcome], "w")
    elif op == "cancel" and ids:
        try:
            q.cancel(rng.choice(ids))
        except Exception:  # noqa: BLE001 -- finished or gone: both are fine here
            pass
    elif op == "lapse" and held:  # the lease ends at once: reclaim or claim takes it back
        q.redis.zadd(keys.inflight_key("m"), {held.pop(): 0})
    elif op == "reclaim":
        q.reclaim("m")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_owner_counter_equals_unfinished_jobs_after_random_operations(
    queue_factory, r: redis.Redis, seed: int
) -> None:
    q: QueueClient = queue_factory(batching={"max_attempts": 2})
    rng = random.Random(seed)
    ids: list[str] = []
    held: list[str] = []
    for i in range(400):
        _step(q, rng, ids, held)
        if i % 50 == 49:
            counted = {k: int(v) for k, v in r.hgetall(keys.owner_jobs_key("m")).items()}
            assert counted == _unfinished_by_owner(q, ids)
    counted = {k: int(v) for k, v in r.hgetall(keys.owner_jobs_key("m")).items()}
    assert counted == _unfinished_by_owner(q, ids)
    assert sum(counted.values()) > 0 or len(ids) > 0
