"""Starvation-freedom across priorities (queue.max_priority_wait_s), on a real Redis.

The claim script reads the server clock, so the tests move time the other way:
they age every queued job by lowering its ``enq`` (what the script compares with
its ``now``), one step per round, and judge each claim by the ``now`` it reports.
"""

from __future__ import annotations

import pytest
import redis
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from sluice import keys
from sluice.jobs import NewJob, Outcome
from sluice.queue import QueueClient
from tests.conftest import budget, make_config

pytestmark = pytest.mark.redis
BOUND_MS = 1000
STEP_MS = 100  # virtual time between two claims


def _age_all(r: redis.Redis, ids: set[str], ms: int) -> None:
    pipe = r.pipeline(transaction=False)
    for jid in ids:
        pipe.hincrby(keys.job_key("m", jid), "enq", -ms)
    pipe.execute()


def _enq(r: redis.Redis, jid: str) -> int:
    return int(r.hget(keys.job_key("m", jid), "enq") or 0)


# Rounds of claims on a real Redis per example: 15% of the profile's budget. The
# `r` fixture is flushed once per test, not per example: each example flushes itself.
@budget(0.15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    max_batch=st.integers(min_value=1, max_value=6),
    extra=st.integers(min_value=1, max_value=3),
    low_rounds=st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=6),
    low_priority=st.sampled_from(["normal", "low"]),
)
def test_no_job_waits_past_the_bound_behind_saturating_high_traffic(
    r: redis.Redis, max_batch: int, extra: int, low_rounds: list[int], low_priority: str
) -> None:
    r.flushall()
    low_rounds = low_rounds[:max_batch]  # all overdue at once still fit one batch
    cfg = make_config(
        batching={"max_batch": max_batch}, queue={"max_priority_wait_s": BOUND_MS / 1000}
    )
    q = QueueClient(r, dict(cfg.models))
    queued: set[str] = set()
    waiting: dict[str, int] = {}  # the low jobs not yet claimed -> their round
    for rnd in range(60):
        # High arrives faster than one worker serves it: the queue never empties.
        highs = [
            NewJob(input=rnd, bucket="32", cost=1, priority="high")
            for _ in range(max_batch + extra)
        ]
        queued |= {s.id for s in q.submit("m", highs)}
        for _ in range(low_rounds.count(rnd)):
            jid = q.submit("m", [NewJob(input="l", bucket="32", cost=1, priority=low_priority)])
            queued.add(jid[0].id)
            waiting[jid[0].id] = rnd
        enq = {jid: _enq(r, jid) for jid in waiting}
        batch = q.claim("m", "w")
        taken = {j.id for j in batch.jobs}
        overdue = {jid for jid, e in enq.items() if batch.claimed_at_ms - e > BOUND_MS}
        assert overdue <= taken, f"round {rnd}: overdue {overdue - taken} not claimed"
        for jid in taken & set(waiting):
            del waiting[jid]
        queued -= taken
        q.complete("m", [Outcome.ok(j.id, None) for j in batch.jobs])
        _age_all(r, queued, STEP_MS)
    assert not waiting, f"never claimed: {waiting}"


def test_an_overdue_low_job_makes_its_bucket_overdue(r: redis.Redis) -> None:
    """Bucket 32's fresh high heads outrank bucket 128's high head by response
    ratio, but a low job overdue behind that head takes the claim to bucket 128."""
    cfg = make_config(batching={"max_batch": 1}, queue={"max_priority_wait_s": 1.0})
    q = QueueClient(r, dict(cfg.models))
    low = q.submit("m", [NewJob(input="l", bucket="128", cost=100, priority="low")])[0].id
    q.submit("m", [NewJob(input="h", bucket="128", cost=100, priority="high")])
    q.submit("m", [NewJob(input="h", bucket="32", cost=1, priority="high") for _ in range(3)])
    _age_all(r, {low}, 5_000)
    service_ms = {"32": 1.0, "128": 1_000_000.0, "512": 1_000_000.0}
    batch = q.claim("m", "w", service_ms=service_ms)
    assert batch.bucket == "128" and [j.id for j in batch.jobs] == [low]


def test_bulk_items_are_not_aged(r: redis.Redis) -> None:
    """Bulk items only fill headroom (ADR 0090): an old one never beats interactive work."""
    cfg = make_config(queue={"max_priority_wait_s": 1.0})
    q = QueueClient(r, dict(cfg.models))
    bulk = q.submit("m", [NewJob(input="b", bucket="32", cost=1, priority="bulk")])[0].id
    _age_all(r, {bulk}, 60_000)
    q.submit("m", [NewJob(input="h", bucket="32", cost=1, priority="high")])
    batch = q.claim("m", "w")
    assert bulk not in {j.id for j in batch.jobs} and len(batch) == 1
