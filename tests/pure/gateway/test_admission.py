"""Admission control's pure functions: parametrised tables, arithmetic in comments."""

from __future__ import annotations

import asyncio

import pytest

from gateway.admission import (
    Load,
    check_deadline,
    check_workers,
    drain_rate,
    limits_for,
    retry_after_full,
)
from gateway.waiters import JobWaiters
from sluice.errors import QueueFull
from sluice.jobs import Owner
from tests.kit.gateway import gateway_config

CFG = gateway_config(queue={"max_queued_jobs": 1000, "max_queued_cost": 100_000})
M = CFG.models["m"]
PINNED = CFG.models["pinned"]
SHED = CFG.gateway.shed_fraction


@pytest.mark.parametrize(
    ("priority", "jobs", "cost"),
    [("high", 1000, 100_000), ("normal", 900, 90_000), ("low", 700, 70_000)],
)
def test_lower_priorities_see_less_room(priority: str, jobs: int, cost: int) -> None:
    limits = limits_for(M, priority, SHED)
    assert (limits.max_jobs, limits.max_cost) == (jobs, cost)


def load(queued: int = 0, cost: int = 0, ready: int = 1, rate: float = 0.0) -> Load:
    return Load(queued, cost, ready, [], rate)


@pytest.mark.parametrize(
    ("err", "new_jobs", "new_cost", "rate", "expected"),
    [
        # cost: 70_000 queued + 5_000 new - 70_000 low limit = 5_000 over; / 1_000 per s = 5
        (QueueFull("", "queue_cost", 600, 70_000), 1, 5_000, 1_000.0, 5),
        # jobs: 700 queued + 1 - 700 = 1 job over, at the average 100 cost; / 10 per s = 10
        (QueueFull("", "queue_jobs", 700, 70_000), 1, 50, 10.0, 10),
        # a tiny excess still says 1 s, never 0
        (QueueFull("", "queue_cost", 600, 70_000), 1, 1, 1e6, 1),
        # a huge excess is capped at an hour
        (QueueFull("", "queue_cost", 600, 70_000), 1, 10**9, 1.0, 3600),
    ],
)
def test_retry_after_is_excess_backlog_over_drain_rate(
    err: QueueFull, new_jobs: int, new_cost: int, rate: float, expected: int
) -> None:
    r = drain_rate(M, load(rate=rate))
    assert r.source == "measured"
    assert retry_after_full(err, limits_for(M, "low", SHED), new_jobs, new_cost, r) == expected


@pytest.mark.parametrize(
    ("err", "new_cost", "expected"),
    [
        # one of 3 partitions full on cost: its share of the low limit is
        # ceil(70_000 / 3) = 23_334; 23_334 + 3_000 new - 23_334 = 3_000 over, drained at
        # 3_000 / 3 = 1_000 per s: 3 s (against the global 70_000 it looked under: 1 s)
        (QueueFull("", "queue_cost", 200, 23_334), 3_000, 3),
        # jobs: share ceil(700 / 3) = 234; 264 + 1 - 234 = 31 over x 100 avg / 1_000: 4 s
        (QueueFull("", "queue_jobs", 264, 26_400), 100, 4),
        # an API key's share: ceil(10 / 3) = 4 unfinished; 6 + 1 - 4 = 3 over x 3_000 / 1_000
        (QueueFull("", "owner_jobs", 6, 0), 3_000, 9),
    ],
)
def test_retry_after_on_a_full_partition_compares_with_its_share(
    err: QueueFull, new_cost: int, expected: int
) -> None:
    r = drain_rate(M, load(rate=3_000.0))
    low, owner = limits_for(M, "low", SHED), Owner("k", max_unfinished=10)
    assert retry_after_full(err, low, 1, new_cost, r, owner, partitions=3) == expected
    assert retry_after_full(err, low, 1, new_cost, r, owner) == 1  # the bug: the minimum


def test_without_a_measurement_the_rate_is_the_config_guess_never_zero() -> None:
    # middle bucket 128: 5 ms + 0.05 ms x 128 = 11.4 ms per job -> 128 / 0.0114 per worker
    one = drain_rate(M, load(ready=1))
    assert one.source == "config" and one.cost_per_s == pytest.approx(128 / 0.0114)
    assert drain_rate(M, load(ready=3)).cost_per_s == pytest.approx(3 * one.cost_per_s)
    assert drain_rate(M, load(ready=0)).cost_per_s == pytest.approx(one.cost_per_s)


@pytest.mark.parametrize(
    ("model", "ready", "starting", "now", "retry"),
    [
        (M, 0, [], 100.0, None),  # scales from zero: accepted
        (PINNED, 1, [], 100.0, None),  # a ready worker
        (PINNED, 0, [], 100.0, 9),  # nothing starting: the whole cold start (9 s)
        (PINNED, 0, [95.0], 100.0, 4),  # started 5 s ago: 9 - 5 = 4 s left
        (PINNED, 0, [80.0], 100.0, 1),  # overdue: still at least 1 s
    ],
)
def test_no_ready_worker(model, ready, starting, now, retry) -> None:  # type: ignore[no-untyped-def]
    err = check_workers(model, Load(0, 0, ready, starting, 0.0), now)
    assert (err.retry_after_s if err else None) == retry


@pytest.mark.parametrize(
    ("cost", "deadline_ms", "shed"),
    [
        (900, 1000, False),  # (900 + 100) / 1000 per s = 1.0 s <= 1 s
        (1000, 1000, True),  # 1.1 s > 1 s
        (10**6, None, False),  # no deadline, never shed for it
    ],
)
def test_deadline_shedding(cost: int, deadline_ms: int | None, shed: bool) -> None:
    err = check_deadline(M, load(cost=cost, rate=1000.0), deadline_ms, 100, 0.0)
    assert (err is not None) == shed


async def test_completions_wake_exactly_the_waiters_of_ended_jobs() -> None:
    c = JobWaiters(None, [])  # type: ignore[arg-type]
    with c.waiter("m.a") as a1, c.waiter("m.a") as a2, c.waiter("m.b") as b:
        assert c.waiting == 3
        assert c.dispatch("m.x,m.a") == 2
        assert a1.done() and a2.done() and not b.done()
        assert c.waiting == 1  # b stays registered until its own job ends
    assert c.waiting == 0
    await asyncio.sleep(0)
