"""The complete script records end-to-end latency (enqueue to finish) per 10 s window."""

from __future__ import annotations

import time

import redis

from sluice import keys
from sluice.jobs import NewJob, Outcome
from sluice.queue import QueueClient
from tests.kit.queue import CountingRedis


def _hist(r: redis.Redis, model: str) -> dict[str, int]:
    """Every e2e window of the model summed (a test may straddle a window edge)."""
    total: dict[str, int] = {}
    for key in r.scan_iter(match=keys.e2e_hist_prefix(model) + "*"):
        assert r.ttl(key) > 0  # windows expire: nothing grows without bound
        for label, n in r.hgetall(key).items():
            total[str(label)] = total.get(str(label), 0) + int(n)
    return total


def test_succeeded_jobs_land_in_the_e2e_histogram(r: redis.Redis, queue_factory) -> None:
    q: QueueClient = queue_factory()
    subs = q.submit("m", [NewJob(input=f"x{i}", bucket="32", cost=1) for i in range(5)])
    time.sleep(0.06)  # every job waits > 50 ms end to end
    batch = q.claim("m", "w1", max_batch=5)
    outcomes = [Outcome.ok(j.id, {"v": 1}) for j in batch.jobs[:4]]
    outcomes.append(Outcome.fail(batch.jobs[4].id, "boom", "x"))
    q.complete("m", outcomes)
    hist = _hist(r, "m")
    assert len(subs) == 5
    assert hist["count"] == 4  # the failed job is not an end-to-end latency sample
    small = sum(hist.get(label, 0) for label in ("5", "10", "25", "50"))
    assert small == 0 and sum(v for k, v in hist.items() if k != "count") == 4


def test_complete_with_histogram_is_still_one_round_trip(redis_url: str, queue_factory) -> None:
    models = queue_factory().ops.models
    counting = CountingRedis.from_url(redis_url, decode_responses=True)
    q = QueueClient(counting, models)
    q.submit("m", [NewJob(input="warm", bucket="32", cost=1)])
    warm = q.claim("m", "w0")
    q.complete("m", [Outcome.ok(j.id, 1) for j in warm.jobs])  # scripts loaded
    q.submit("m", [NewJob(input=f"x{i}", bucket="32", cost=1) for i in range(20)])
    batch = q.claim("m", "w1", max_batch=20)
    CountingRedis.trips = 0
    q.complete("m", [Outcome.ok(j.id, 1) for j in batch.jobs])
    assert CountingRedis.trips == 1
    assert _hist(counting, "m")["count"] == 21
