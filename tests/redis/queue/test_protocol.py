"""The queue protocol against a real redis-server: each DESIGN.md property."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from sluice import keys
from sluice.errors import JobConflict, JobNotFound, QueueFull
from sluice.jobs import JobStatus, NewJob, Outcome
from sluice.queue import QueueClient
from tests.conftest import on_cluster
from tests.kit.queue import CountingRedis
from tests.waits import redis_now_ms, wait_until

pytestmark = pytest.mark.redis
# The place a retried job goes back to is under test here, not its backoff (that is
# tests/redis/admin): these retry at once.
AT_ONCE = {"backoff_ms": 0}


def small(i: int, cost: int = 4, **kw: Any) -> NewJob:
    return NewJob(input=f"text {i}", bucket="32", cost=cost, **kw)


@pytest.mark.skipif(on_cluster(), reason="counts the round trips of a single-node client")
def test_submit_claim_complete_each_one_round_trip(redis_url: str, queue_factory) -> None:
    cfg_models = queue_factory().ops.models
    counting = CountingRedis.from_url(redis_url, decode_responses=True)
    q = QueueClient(counting, cfg_models)
    q.submit("m", [small(0)])  # loads the scripts once (EVALSHA miss -> SCRIPT LOAD)
    q.claim("m", "w0")
    q.complete("m", [])

    CountingRedis.trips = 0
    submitted = q.submit("m", [small(i) for i in range(50)])
    assert CountingRedis.trips == 1
    CountingRedis.trips = 0
    batch = q.claim("m", "w1", max_batch=32)
    assert CountingRedis.trips == 1 and len(batch) == 32
    CountingRedis.trips = 0
    q.complete("m", [Outcome.ok(j.id, {"n": 1}) for j in batch.jobs])
    assert CountingRedis.trips == 1
    assert len(submitted) == 50


def test_results_timings_and_counters(queue_factory) -> None:
    q = queue_factory()
    [sub] = q.submit("m", [small(1, metadata={"user": "a"})])
    batch = q.claim("m", "w1")
    assert [j.id for j in batch.jobs] == [sub.id]
    assert batch.jobs[0].input == "text 1" and batch.jobs[0].attempts == 1
    assert q.get(sub.id).status is JobStatus.RUNNING
    q.complete("m", [Outcome.ok(sub.id, {"v": [1, 2]}, run_ms=3.5)])
    rec = q.get(sub.id)
    assert rec.status is JobStatus.SUCCEEDED
    assert rec.result == {"v": [1, 2]} and rec.metadata == {"user": "a"}
    assert rec.timings["queue_wait_ms"] is not None and rec.timings["queue_wait_ms"] >= 0
    assert rec.finished_at_ms is not None and rec.finished_at_ms >= rec.queued_at_ms
    assert rec.run_ms == 3.5
    stats = q.stats("m")
    assert stats.counters["arrived"] == 1 and stats.counters["succeeded"] == 1
    assert stats.queued == 0 and stats.in_flight == 0 and stats.queued_cost == 0


def test_stats_count_and_cost_per_bucket(queue_factory) -> None:
    q = queue_factory()
    q.submit("m", [small(i, cost=10) for i in range(3)])
    q.submit("m", [NewJob(input="x", bucket="512", cost=400)])
    stats = q.stats("m")
    by_bucket = {b.bucket: (b.queued, b.queued_cost) for b in stats.buckets}
    assert by_bucket == {"32": (3, 30), "128": (0, 0), "512": (1, 400)}
    batch = q.claim("m", "w")
    assert q.stats("m").queued_cost == 430 - batch.cost
    assert q.stats("m").in_flight == len(batch)


def test_priority_order_within_a_bucket(queue_factory) -> None:
    q = queue_factory()
    low = q.submit("m", [small(0, priority="low")])[0].id
    normal = q.submit("m", [small(1)])[0].id
    high = q.submit("m", [small(2, priority="high")])[0].id
    normal2 = q.submit("m", [small(3)])[0].id
    batch = q.claim("m", "w", max_batch=10)
    assert [j.id for j in batch.jobs] == [high, normal, normal2, low]


def test_idempotent_replay_returns_the_same_job(queue_factory) -> None:
    q = queue_factory()
    first = q.submit("m", [small(0, idempotency_key="abc")])[0]
    again = q.submit("m", [small(9, idempotency_key="abc")])[0]
    assert first.created and not again.created and again.id == first.id
    assert q.stats("m").queued == 1 and q.stats("m").counters["arrived"] == 1


def test_admission_limits_refuse_the_whole_call(queue_factory) -> None:
    q = queue_factory()
    q.submit("m", [small(i, cost=10) for i in range(3)], max_jobs=5)
    with pytest.raises(QueueFull) as exc:
        q.submit("m", [small(i) for i in range(3)], max_jobs=5)
    assert exc.value.reason == "queue_jobs" and exc.value.queued == 3
    with pytest.raises(QueueFull) as exc:
        q.submit("m", [small(0, cost=25)], max_cost=50)
    assert exc.value.reason == "queue_cost" and exc.value.queued_cost == 30
    assert q.stats("m").queued == 3  # nothing of a refused call was stored


def test_expired_deadline_is_never_claimed(queue_factory) -> None:
    q = queue_factory()
    doomed = q.submit("m", [small(0, deadline_ms=30)])[0].id
    alive = q.submit("m", [small(1, deadline_ms=60_000)])[0].id
    time.sleep(0.06)
    batch = q.claim("m", "w")
    assert [j.id for j in batch.jobs] == [alive]
    assert batch.expired == 1
    assert q.get(doomed).status is JobStatus.EXPIRED
    assert q.stats("m").counters["expired"] == 1


def test_expired_lease_redelivers_in_its_original_place(queue_factory) -> None:
    q = queue_factory(batching={"lease_s": 0.1, "max_attempts": 3}, retry=AT_ONCE)
    ids = [s.id for s in q.submit("m", [small(i) for i in range(3)])]
    first = q.claim("m", "w1", max_batch=1)
    assert [j.id for j in first.jobs] == [ids[0]]
    time.sleep(0.15)
    again = q.claim("m", "w2", max_batch=2)
    assert again.reclaimed == 1
    assert [j.id for j in again.jobs] == ids[:2]  # back in front of the others
    assert again.jobs[0].attempts == 2
    # w1's late result is stale-proof: first outcome wins, later ones are ignored.
    assert q.complete("m", [Outcome.ok(ids[0], "from w1")]) == (1, 0)
    assert q.complete("m", [Outcome.ok(ids[0], "from w2")]) == (0, 1)
    assert q.get(ids[0]).result == "from w1"


def test_a_claim_on_empty_queues_still_reclaims_and_promotes(r: redis.Redis, queue_factory) -> None:
    # An empty claim returns early (ADR 0177) only while no lease has lapsed and no
    # retry is due: each alone, with every queue empty, still reaches the full claim.
    q = queue_factory(batching={"lease_s": 0.2, "max_attempts": 3}, retry=AT_ONCE)
    lapsed = q.submit("m", [small(0)])[0].id
    assert [j.id for j in q.claim("m", "w1").jobs] == [lapsed]
    expiry = r.zscore(keys.inflight_key("m"), lapsed)
    assert expiry is not None and r.exists(keys.queue_key("m", "32")) == 0
    wait_until(lambda: redis_now_ms(r) > expiry, what="the lease to lapse")
    again = q.claim("m", "w2")
    assert again.reclaimed == 1 and [j.id for j in again.jobs] == [lapsed]
    q = queue_factory(batching={"lease_s": 30}, retry={"backoff_ms": 40, "backoff_max_ms": 40})
    assert q.complete("m", [Outcome.retry(lapsed, "ValueError", "boom")], "w2") == (1, 0)
    due = r.zscore(keys.retry_key("m"), lapsed)
    assert due is not None and r.exists(keys.queue_key("m", "32")) == 0
    wait_until(lambda: redis_now_ms(r) > due, what="the backoff to pass")
    assert [j.id for j in q.claim("m", "w3").jobs] == [lapsed]
    assert len(q.claim("m", "w3")) == 0  # nothing due: the early exit


def test_dead_letter_after_max_attempts_keeps_the_error(queue_factory) -> None:
    q = queue_factory(batching={"lease_s": 30, "max_attempts": 2}, retry=AT_ONCE)
    job = q.submit("m", [small(0)])[0].id
    for attempt in (1, 2):
        batch = q.claim("m", "w")
        assert [j.attempts for j in batch.jobs] == [attempt]
        q.complete("m", [Outcome.retry(job, "ValueError", f"boom {attempt}")])
    rec = q.get(job)
    assert rec.status is JobStatus.FAILED
    assert rec.error == {"type": "ValueError", "message": "boom 2"}
    assert q.dead_letters("m") == [job]
    assert len(q.claim("m", "w")) == 0


def test_lease_expiry_counts_as_an_attempt_then_dead_letters(queue_factory) -> None:
    q = queue_factory(batching={"lease_s": 0.05, "max_attempts": 2}, retry=AT_ONCE)
    job = q.submit("m", [small(0)])[0].id
    q.claim("m", "w")
    time.sleep(0.08)
    assert len(q.claim("m", "w")) == 1
    time.sleep(0.08)
    assert q.reclaim("m") == 1
    rec = q.get(job)
    assert rec.status is JobStatus.FAILED and rec.error["type"] == "lease_expired"
    assert q.dead_letters("m") == [job]


def test_renew_keeps_a_lease_alive(r: redis.Redis, queue_factory) -> None:
    q = queue_factory(batching={"lease_s": 0.2})
    job = q.submit("m", [small(0)])[0].id
    q.claim("m", "w1")
    claimed_expiry_ms = r.zscore(keys.inflight_key("m"), job)
    assert claimed_expiry_ms is not None
    # Renewed with a long lease, so a slow machine cannot let it lapse between calls.
    assert queue_factory(batching={"lease_s": 30}).renew("m", "w1", [job]) == []
    wait_until(lambda: redis_now_ms(r) > claimed_expiry_ms, what="the claimed lease to pass")
    assert len(q.claim("m", "w2")) == 0  # never redelivered while renewed
    assert q.renew("m", "intruder", [job]) == [job]


def test_permanent_failure_is_not_retried(queue_factory) -> None:
    q = queue_factory()
    job = q.submit("m", [small(0)])[0].id
    q.claim("m", "w")
    q.complete("m", [Outcome.fail(job, "bad_input", "cannot parse")])
    rec = q.get(job)
    assert rec.status is JobStatus.FAILED and rec.attempts == 1
    assert rec.error == {"type": "bad_input", "message": "cannot parse"}


def test_cancel_queued_running_and_finished(queue_factory) -> None:
    q = queue_factory()
    a, b, c = (s.id for s in q.submit("m", [small(i) for i in range(3)]))
    assert q.cancel(a) == "queued"
    assert q.stats("m").queued == 2
    batch = q.claim("m", "w", max_batch=1)
    assert [j.id for j in batch.jobs] == [b]
    assert q.cancel(b) == "running"
    assert q.complete("m", [Outcome.ok(b, "late")]) == (0, 1)  # result discarded
    assert q.get(b).status is JobStatus.CANCELLED and q.get(b).result is None
    q.claim("m", "w")
    q.complete("m", [Outcome.ok(c, "done")])
    with pytest.raises(JobConflict):
        q.cancel(c)
    with pytest.raises(JobNotFound):
        q.cancel("m.doesnotexist")


def test_unknown_and_cross_model_ids_are_not_found(queue_factory) -> None:
    q = queue_factory()
    job = q.submit("m", [small(0)])[0].id
    for bad in ("nope", "other.123", "m.", ".x", "m.unknown"):
        with pytest.raises(JobNotFound):
            q.get(bad)
    with pytest.raises(JobNotFound):
        q.get(job, model="other")


def test_completion_publishes_ended_ids(queue_factory, r: redis.Redis) -> None:
    q = queue_factory()
    ids = [s.id for s in q.submit("m", [small(i) for i in range(3)])]
    pubsub = r.pubsub()
    pubsub.subscribe(keys.done_channel("m"))
    pubsub.get_message(timeout=1)  # the subscribe confirmation
    q.claim("m", "w")
    q.complete("m", [Outcome.ok(i, None) for i in ids])
    msg = pubsub.get_message(timeout=2)
    assert msg is not None and sorted(msg["data"].split(",")) == sorted(ids)
    pubsub.close()


def test_queue_wait_histogram_is_recorded_at_claim(queue_factory, r: redis.Redis) -> None:
    q = queue_factory()
    q.submit("m", [small(i) for i in range(5)])
    batch = q.claim("m", "w")
    window = batch.claimed_at_ms // 10_000 * 10
    hist = r.hgetall(keys.wait_hist_key("m", window))
    assert int(hist["count"]) == 5
    assert sum(int(v) for k, v in hist.items() if k != "count") == 5
    assert r.ttl(keys.wait_hist_key("m", window)) > 0


def test_scripts_use_the_server_clock(queue_factory, r: redis.Redis) -> None:
    q = queue_factory()
    server_ms = int(r.time()[0]) * 1000
    job = q.submit("m", [small(0)])[0].id
    assert abs(q.get(job).queued_at_ms - server_ms) < 5_000


def test_input_round_trips_any_json(queue_factory) -> None:
    q = queue_factory()
    value = {"text": "héllo ✓", "nested": [1, 2.5, None, {"a": True}]}
    q.submit("m", [NewJob(input=value, bucket="32", cost=3)])
    [job] = q.claim("m", "w").jobs
    assert job.input == value
    assert json.loads(json.dumps(job.input)) == value


def test_large_batches_and_submits_go_through_in_one_call(queue_factory) -> None:
    # Thousands of values per Redis command would overflow Lua's unpack: the
    # scripts chunk them, and nothing is lost or reordered.
    q = queue_factory(batching={"max_batch": 4096, "max_batch_tokens": 100_000})
    ids = [s.id for s in q.submit("m", [small(i, cost=1) for i in range(5000)])]
    batch = q.claim("m", "w")
    assert [j.id for j in batch.jobs] == ids[:4096]
    assert q.stats("m").in_flight == 4096 and q.stats("m").queued == 904
    assert q.complete("m", [Outcome.ok(j.id, None) for j in batch.jobs]) == (4096, 0)
    stats = q.stats("m")
    assert stats.in_flight == 0 and stats.counters["succeeded"] == 4096
    assert stats.queued_cost == 904


def test_a_lapsed_worker_cannot_give_back_a_job_another_worker_holds(queue_factory) -> None:
    q = queue_factory(batching={"lease_s": 0.1, "max_attempts": 5}, retry=AT_ONCE)
    job = q.submit("m", [small(0)])[0].id
    q.claim("m", "a")
    time.sleep(0.15)
    assert [j.id for j in q.claim("m", "b").jobs] == [job]  # a's lease lapsed
    assert q.complete("m", [Outcome.retry(job, "E", "late")], worker_id="a") == (0, 1)
    assert q.complete("m", [Outcome.fail(job, "E", "late")], worker_id="a") == (0, 1)
    rec = q.get(job)
    assert rec.status is JobStatus.RUNNING and rec.worker == "b"
    assert q.renew("m", "b", [job]) == []  # b still holds its lease
    assert q.complete("m", [Outcome.ok(job, "b's")], worker_id="b") == (1, 0)
    assert q.get(job).result == "b's"


def test_release_requeues_in_place_without_using_an_attempt(queue_factory) -> None:
    q = queue_factory(batching={"max_attempts": 1})
    ids = [s.id for s in q.submit("m", [small(i) for i in range(3)])]
    batch = q.claim("m", "w", max_batch=2)
    done = q.complete("m", [Outcome.release(j.id) for j in batch.jobs], worker_id="w")
    assert done == (2, 0)
    assert all(q.get(i).status is JobStatus.QUEUED and q.get(i).attempts == 0 for i in ids[:2])
    assert q.stats("m").in_flight == 0 and q.stats("m").queued_cost == 12
    again = q.claim("m", "w2", max_batch=3)
    assert [j.id for j in again.jobs] == ids and again.jobs[0].attempts == 1
    assert q.dead_letters("m") == []


def test_idempotency_key_of_an_expired_job_makes_a_new_job(queue_factory, r: redis.Redis) -> None:
    q = queue_factory()
    first = q.submit("m", [small(0, idempotency_key="k")])[0]
    r.delete(keys.job_key("m", first.id))  # what the result TTL does
    again = q.submit("m", [small(1, idempotency_key="k")])[0]
    assert again.created and again.id != first.id
    assert q.get(again.id).status is JobStatus.QUEUED


def test_lone_surrogates_survive_the_round_trip(queue_factory) -> None:
    q = queue_factory()
    value = {"text": "bad \ud800 half"}
    job = q.submit("m", [NewJob(input=value, bucket="32", cost=2)])[0].id
    [claimed] = q.claim("m", "w").jobs
    assert claimed.input == value
    assert q.complete("m", [Outcome.ok(job, {"echo": "\udfff"})], worker_id="w") == (1, 0)
    assert q.get(job).result == {"echo": "\udfff"}
