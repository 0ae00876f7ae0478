"""The claim's token budget counts padded tokens, and agrees with the warm-up shapes."""

from __future__ import annotations

import pytest
import redis
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from sluice.jobs import BULK, NewJob, Outcome
from sluice.queue import QueueClient
from tests.conftest import budget, make_config
from workers.handlers.base import warmup_shapes

pytestmark = pytest.mark.redis
BOUNDS = (32, 128, 512)


def _bucket(cost: int) -> str:
    return str(next(b for b in BOUNDS if cost <= b))


# A submit and claims on a real Redis per example: two fifths of the profile's budget.
# The `r` fixture is flushed once per test, not per example: each example flushes itself.
@budget(0.4, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    costs=st.lists(st.integers(min_value=1, max_value=512), min_size=1, max_size=60),
    max_batch=st.integers(min_value=1, max_value=40),
    budget=st.integers(min_value=512, max_value=4096),
    priority=st.sampled_from(["normal", BULK]),
    prefetch=st.booleans(),
)
def test_no_batch_is_padded_past_the_budget_or_the_warm_up_shape(
    r: redis.Redis, costs: list[int], max_batch: int, budget: int, priority: str, prefetch: bool
) -> None:
    r.flushall()
    batching = {"max_batch": max_batch, "max_batch_tokens": budget}
    cfg = make_config(batching=batching, bulk={"max_batch": max_batch, "max_batch_tokens": budget})
    q = QueueClient(r, dict(cfg.models))
    warm = {str(s.tokens): s for s in warmup_shapes(cfg.models["m"], [str(b) for b in BOUNDS])}
    jobs = [
        NewJob(input=i, bucket=_bucket(c), cost=c, priority=priority) for i, c in enumerate(costs)
    ]
    ids = [s.id for s in q.submit("m", jobs)]
    order = {b: [i for i, c in zip(ids, costs, strict=True) if _bucket(c) == b] for b in warm}
    claimed: dict[str, list[str]] = {b: [] for b in order}
    # A prefetch (bulk=False) never takes bulk items: a plain claim drains those.
    bulk_ok = priority == BULK or not prefetch
    while batch := q.claim("m", "w", bulk=bulk_ok):
        if not batch.jobs:
            break
        shape = warm[batch.bucket]
        assert len(batch) <= max_batch
        if len(batch) > 1:
            assert batch.padded_cost <= budget, f"padded {batch.padded_cost} > budget {budget}"
            assert batch.padded_cost <= shape.batch * shape.tokens, "batch beyond warm-up shape"
        claimed[batch.bucket] += [j.id for j in batch.jobs]
        q.complete("m", [Outcome.ok(j.id, None) for j in batch.jobs])
    # Every job ran, and an over-budget job kept its place (TGI-style).
    assert claimed == order
