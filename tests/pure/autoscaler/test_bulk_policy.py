"""decide() with bulk work (ADR 0090): tables (arithmetic in the comments) and properties.

Same policy as test_policy.py: mu = 1000 cost/s per replica, target utilisation 0.5
(500 cost/s per replica), backlog_drain_s 10 (a replica drains 10000 cost in it),
min 1, max 20, steps up of max(current x 100%, 4), tolerance 0.1.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.observation import Observation
from autoscaler.policy import REASONS, PolicyState, decide
from sluice.config import AutoscalingConfig
from tests.kit.policy import NOW, obs, observations, pol, policies, recs, states

ZERO: dict[str, Any] = {"min_replicas": 0, "idle_s": 60}  # a scale-to-zero model
ASLEEP = PolicyState(last_active_s=NOW - 500)  # idle long past idle_s

CASES = [
    # id, policy overrides, observation, state, desired, reason
    # Interactive 1000 / 500 = 2; a 5M-cost bulk backlog with no cap adds nothing.
    (
        "cap-none-fills-headroom",
        {},
        obs(2, 1000, bulk_queued=500, bulk_queued_cost=50_000, bulk_backlog_cost=5_000_000),
        PolicyState(),
        2,
        "steady",
    ),
    # Interactive 0; bulk 0 + 1e6 / (1000 * 10) = 100, capped at 3; one step (1 + 4) allows it.
    (
        "cap-3-scales-to-3",
        {"low_priority_max_replicas": 3},
        obs(1, 0, bulk_queued=100, bulk_backlog_cost=1_000_000),
        PolicyState(),
        3,
        "bulk",
    ),
    # The same 3, but max_replicas 2 bounds it.
    (
        "cap-3-bounded-by-max",
        {"low_priority_max_replicas": 3, "max_replicas": 2},
        obs(1, 0, bulk_queued=100, bulk_backlog_cost=1_000_000),
        PolicyState(),
        2,
        "max",
    ),
    # Cap 10 asks for min(10, 100) = 10, but one step up is max(1 * 100%, 4): 1 + 4 = 5.
    (
        "cap-step-limited",
        {"low_priority_max_replicas": 10},
        obs(1, 0, bulk_backlog_cost=1_000_000),
        PolicyState(),
        5,
        "bulk",
    ),
    # Interactive 2500 / 500 = 5 replicas; bulk's min(2, 5 + 100) = 2 does not lower it.
    (
        "does-not-mask-interactive",
        {"low_priority_max_replicas": 2},
        obs(5, 2500, bulk_queued=100, bulk_backlog_cost=1_000_000),
        PolicyState(),
        5,
        "steady",
    ),
    # ... nor stop it rising: 3 -> 5 for the interactive load.
    (
        "interactive-still-rises",
        {"low_priority_max_replicas": 2},
        obs(3, 2500, bulk_queued=100, bulk_backlog_cost=1_000_000),
        PolicyState(),
        5,
        "load",
    ),
    # Interactive need 3, bulk 3 + 10500 / 10000 = 4.05: |4.05 / 4 - 1| = 0.0125 <= 0.1, so
    # bulk holds 4 rather than ceil(4.05) = 5 (and interactive alone lands at ceil(3.3) = 4).
    (
        "cap-inside-tolerance",
        {"low_priority_max_replicas": 10},
        obs(4, 1500, bulk_backlog_cost=10_500),
        PolicyState(),
        4,
        "steady",
    ),
    # 5000 bulk items of cost 500000 are not interactive backlog (had they been:
    # 2 + 500000 / 10000 = 52, step-limited to 6): interactive 1000 / 500 = 2 holds.
    (
        "bulk-queue-is-not-backlog",
        {},
        obs(2, 1000, bulk_queued=5000, bulk_queued_cost=500_000, bulk_backlog_cost=500_000),
        PolicyState(),
        2,
        "steady",
    ),
    # A low-only interactive backlog is capped at 2 as before; bulk's min(2, 100) adds nothing.
    (
        "low-priority-cap-kept",
        {"low_priority_max_replicas": 2},
        obs(1, 0, queued=100, queued_cost=1_000_000, queued_non_low=0, bulk_backlog_cost=1e6),
        PolicyState(),
        2,
        "low-priority-cap",
    ),
    # At zero with queued bulk items and no cap: one replica, so the bulk job finishes.
    (
        "wake-queued",
        ZERO,
        obs(0, 0, ready=0, bulk_queued=10, bulk_queued_cost=1000, bulk_backlog_cost=1000),
        ASLEEP,
        1,
        "bulk-wake",
    ),
    # ... or with only a live coordinator's unfed backlog (nothing queued yet).
    ("wake-backlog-only", ZERO, obs(0, 0, ready=0, bulk_backlog_cost=1000), ASLEEP, 1, "bulk-wake"),
    # ... even before any arrival rate is known (a restarted autoscaler),
    ("wake-no-rate-yet", ZERO, obs(0, None, ready=0, bulk_queued=5), PolicyState(), 1, "bulk-wake"),
    # ... or any service rate.
    (
        "wake-no-service-rate",
        {**ZERO, "service_rate_cost_per_s": None},
        obs(0, 0, ready=0, service_rate=None, bulk_queued=5),
        ASLEEP,
        1,
        "bulk-wake",
    ),
    # With cap 3 a model at zero is sized by the cap rule: min(3, 0 + 1e6 / 10000) = 3.
    (
        "wake-cap-3",
        {**ZERO, "low_priority_max_replicas": 3},
        obs(0, 0, ready=0, bulk_backlog_cost=1_000_000),
        ASLEEP,
        3,
        "bulk",
    ),
    # Cap 0: bulk never wakes a model ...
    (
        "cap-0-never-wakes",
        {**ZERO, "low_priority_max_replicas": 0},
        obs(0, 0, ready=0, bulk_queued=10, bulk_backlog_cost=1000),
        ASLEEP,
        0,
        "steady",
    ),
    (
        "cap-0-no-rate-yet",
        {**ZERO, "low_priority_max_replicas": 0},
        obs(0, None, ready=0, bulk_queued=10),
        PolicyState(),
        0,
        "missing-metrics",
    ),
    # ... nor keeps one: idle 61 s >= 60 s, to zero at once.
    (
        "cap-0-lets-idle",
        {**ZERO, "low_priority_max_replicas": 0},
        obs(2, 0, bulk_queued=10, bulk_backlog_cost=1000),
        PolicyState(last_active_s=NOW - 61),
        0,
        "idle",
    ),
    # No cap: pending bulk work is activity, so the floor is 1: 2 -> 1, never to zero.
    (
        "cap-none-keeps-one",
        ZERO,
        obs(2, 0, bulk_queued=10, bulk_backlog_cost=1000),
        recs(active_ago_s=61),
        1,
        "min",
    ),
    (
        "cap-none-holds-last",
        ZERO,
        obs(1, 0, bulk_backlog_cost=1000),
        recs(active_ago_s=61),
        1,
        "min",
    ),
    # A switched-off model (max_replicas 0) stays off.
    (
        "max-zero-stays-off",
        {**ZERO, "max_replicas": 0},
        obs(0, 0, ready=0, bulk_queued=10, bulk_backlog_cost=1000),
        ASLEEP,
        0,
        "steady",
    ),
    # The bulk job ended; 3 was recommended 100 s ago: down only after the 300 s window.
    (
        "after-bulk-stabilizes",
        {"low_priority_max_replicas": 3},
        obs(3, 0),
        recs((100, 3)),
        3,
        "stabilizing",
    ),
    # The queue read failed: hold, whatever bulk seems to want ...
    (
        "missing-holds",
        {"low_priority_max_replicas": 3},
        obs(1, 0, queued=None, bulk_queued=100, bulk_backlog_cost=1e6),
        PolicyState(),
        1,
        "missing-metrics",
    ),
    # ... also at zero.
    (
        "missing-holds-at-zero",
        ZERO,
        obs(0, 0, ready=0, queued=None, bulk_queued=100),
        PolicyState(),
        0,
        "missing-metrics",
    ),
]


@pytest.mark.parametrize(
    ("overrides", "o", "state", "desired", "reason"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_decide_with_bulk(
    overrides: dict[str, Any], o: Observation, state: PolicyState, desired: int, reason: str
) -> None:
    d = decide(pol(**overrides), o, state, NOW)
    assert (d.desired, d.reason) == (desired, reason)
    assert d.reason in REASONS  # a bounded Prometheus label


def test_no_observation_holds() -> None:
    d = decide(pol(low_priority_max_replicas=3), None, PolicyState(), NOW)
    assert (d.desired, d.reason) == (0, "missing-metrics")


# -- properties ---------------------------------------------------------------
bulks = st.tuples(st.integers(0, 1000), st.floats(0, 10_000_000))


def _with(o: Observation, bulk: tuple[int, float]) -> Observation:
    return replace(o, bulk_queued=bulk[0], bulk_backlog_cost=bulk[1])


@given(policies, observations, states, bulks)
def test_bulk_never_lowers_desired(
    p: AutoscalingConfig, o: Observation, s: PolicyState, bulk: tuple[int, float]
) -> None:
    assert decide(p, _with(o, bulk), s, NOW).desired >= decide(p, o, s, NOW).desired


@given(policies, observations, states, bulks)
def test_bulk_raises_desired_only_up_to_the_cap(
    p: AutoscalingConfig, o: Observation, s: PolicyState, bulk: tuple[int, float]
) -> None:
    # min_replicas >= 1 here: unset cap (0 extra) and cap 0 change nothing.
    base = decide(p, o, s, NOW).desired
    cap = p.low_priority_max_replicas or 0
    assert decide(p, _with(o, bulk), s, NOW).desired <= max(base, cap)


@given(policies, observations, states, bulks)
def test_cap_zero_ignores_bulk(
    p: AutoscalingConfig, o: Observation, s: PolicyState, bulk: tuple[int, float]
) -> None:
    p = p.model_copy(update={"min_replicas": 0, "low_priority_max_replicas": 0})
    assert decide(p, _with(o, bulk), s, NOW) == decide(p, o, s, NOW)


@given(observations, st.integers(1, 20), st.none() | st.floats(0, 50_000), bulks)
def test_cap_none_wakes_a_sleeping_model_to_one(
    o: Observation, top: int, lam: float | None, bulk: tuple[int, float]
) -> None:
    p = pol(min_replicas=0, max_replicas=top, idle_s=60)
    o = replace(o, current=0, ready=0, starting=0)
    s = PolicyState(last_active_s=NOW - 1000, started_s=NOW - 3600)
    base = decide(p, replace(o, arrival_rate_cost=lam), s, NOW).desired
    d = decide(p, _with(replace(o, arrival_rate_cost=lam), bulk), s, NOW)
    assert d.desired <= max(base, 1)  # nothing beyond the wake
    if bulk[0] > 0 or bulk[1] > 0:
        assert d.desired >= 1
