"""Hypothesis properties and starvation, against the real server."""

from __future__ import annotations

import time

import pytest
import redis
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from sluice.jobs import NewJob, Outcome
from sluice.queue import QueueClient
from tests.conftest import budget, make_config

pytestmark = pytest.mark.redis


# A submit and claims on a real Redis per example: two fifths of the profile's budget.
# The `r` fixture is flushed once per test, not per example: each example flushes itself.
@budget(0.4, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    costs=st.lists(st.integers(min_value=1, max_value=512), min_size=1, max_size=60),
    max_batch=st.integers(min_value=1, max_value=16),
    budget=st.integers(min_value=512, max_value=2048),
)
def test_token_budget_is_never_exceeded(
    r: redis.Redis, costs: list[int], max_batch: int, budget: int
) -> None:
    r.flushall()
    cfg = make_config(batching={"max_batch": max_batch, "max_batch_tokens": budget})
    q = QueueClient(r, dict(cfg.models))
    bucket = {c: next(str(b) for b in (32, 128, 512) if c <= b) for c in costs}
    ids = [s.id for s in q.submit("m", [NewJob(input=c, bucket=bucket[c], cost=c) for c in costs])]
    seen: list[str] = []
    while True:
        batch = q.claim("m", "w")
        if not batch.jobs:
            break
        assert len(batch) <= max_batch
        assert batch.cost <= budget
        assert len({bucket[j.cost] for j in batch.jobs}) == 1  # one bucket per batch
        seen += [j.id for j in batch.jobs]
        q.complete("m", [Outcome.ok(j.id, None) for j in batch.jobs])
    assert sorted(seen) == sorted(ids)


# As above, a quarter of the budget (the batch is one claim).
@budget(0.25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prios=st.lists(st.sampled_from(["high", "normal", "low"]), min_size=1, max_size=30))
def test_within_a_bucket_priority_then_arrival_order(r: redis.Redis, prios: list[str]) -> None:
    r.flushall()
    q = QueueClient(r, dict(make_config(batching={"max_batch": 100}).models))
    ids = [
        q.submit("m", [NewJob(input=i, bucket="32", cost=1, priority=p)])[0].id
        for i, p in enumerate(prios)
    ]
    batch = q.claim("m", "w")
    rank = {"high": 0, "normal": 1, "low": 2}
    expected = sorted(range(len(ids)), key=lambda i: (rank[prios[i]], i))
    assert [j.id for j in batch.jobs] == [ids[i] for i in expected]


def test_no_bucket_starves_under_a_sustained_stream_of_small_jobs(r: redis.Redis) -> None:
    """Small jobs arrive faster than they are served; the large job still runs."""
    q = QueueClient(r, dict(make_config(batching={"max_batch": 4}).models))
    service_ms = {"32": 1.0, "128": 4.0, "512": 10.0}
    big = q.submit("m", [NewJob(input="big", bucket="512", cost=500)])[0].id
    claimed_big_at = None
    deadline = time.monotonic() + 10
    rounds = 0
    while time.monotonic() < deadline:
        rounds += 1
        q.submit("m", [NewJob(input=rounds, bucket="32", cost=2) for _ in range(8)])
        batch = q.claim("m", "w", service_ms=service_ms)
        q.complete("m", [Outcome.ok(j.id, None) for j in batch.jobs])
        if any(j.id == big for j in batch.jobs):
            claimed_big_at = rounds
            break
        time.sleep(0.002)
    assert claimed_big_at is not None, f"large job starved for {rounds} rounds"
    assert q.stats("m").buckets[0].queued > 0  # small work was still waiting: real overload


def test_hrrn_prefers_the_long_waiting_head(r: redis.Redis) -> None:
    q = QueueClient(r, dict(make_config().models))
    service_ms = {"32": 10.0, "128": 40.0, "512": 100.0}
    old_big = q.submit("m", [NewJob(input="big", bucket="512", cost=400)])[0].id
    time.sleep(0.3)  # big head ratio (300+100)/100 = 4
    q.submit("m", [NewJob(input="s", bucket="32", cost=2)])  # small ratio ~ (0+10)/10 = 1
    assert [j.id for j in q.claim("m", "w", service_ms=service_ms).jobs] == [old_big]
