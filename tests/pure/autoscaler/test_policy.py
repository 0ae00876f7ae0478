"""decide() as tables (arithmetic in the comments) and hypothesis properties."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from autoscaler.observation import Observation
from autoscaler.policy import Decision, PolicyState, decide
from autoscaler.sim import simulator, traces
from autoscaler.sim.controllers import SluicePolicy
from sluice.config import AutoscalingConfig
from tests.conftest import budget

NOW = 10_000.0
# One replica serves mu = 1000 cost/s; at u = 0.5 it is sized for 500 cost/s.
BASE: dict[str, Any] = dict(
    min_replicas=1,
    max_replicas=20,
    target_utilization=0.5,
    p99_wait_slo_ms=1000,
    backlog_drain_s=10,
    scale_up_max_percent=100,
    scale_up_max_step=4,
    scale_down_window_s=300,
    scale_down_max_step=1,
    tolerance=0.1,
    cold_start_s=30,
    service_rate_cost_per_s=1000,
)


def pol(**kw: Any) -> AutoscalingConfig:
    return AutoscalingConfig(**{**BASE, **kw})


def obs(cur: int, lam: float | None = 0.0, **kw: Any) -> Observation:
    fields: dict[str, Any] = dict(
        current=cur, ready=cur, arrival_rate_cost=lam, service_rate=1000.0
    )
    fields.update(kw)
    return Observation(**fields)


def recs(*pairs: tuple[float, int], active_ago_s: float | None = None) -> PolicyState:
    """Recommendations made ``age`` seconds ago, by a policy running for an hour."""
    return PolicyState(
        recommendations=tuple((NOW - age, n) for age, n in pairs),
        started_s=NOW - 3600,
        last_active_s=None if active_ago_s is None else NOW - active_ago_s,
    )


CASES = [
    # id, policy overrides, observation, state, desired, reason
    # 2000 / (1000 * 0.5) = 4 replicas: no change.
    ("steady", {}, obs(4, 2000), PolicyState(), 4, "steady"),
    # 2150 / 500 = 4.3; |4.3 / 4 - 1| = 0.075 <= 0.1: inside the band.
    ("tolerance", {}, obs(4, 2150), PolicyState(), 4, "tolerance"),
    # 3000 / 500 = 6 > 4 * 1.1.
    ("load-up", {}, obs(4, 3000), PolicyState(), 6, "load"),
    # 10000 / 500 = 20, but one step is max(2 * 100%, 4) = 4: 2 + 4 = 6.
    ("step-limit", {}, obs(2, 10_000), PolicyState(), 6, "load"),
    # Backlog 60000; ready spare = 4 * 1000 - 2000 = 2000/s: gone in 30 s <= cold start 30 s.
    (
        "backlog-gone-before-cold-start",
        {},
        obs(4, 2000, queued=500, queued_cost=60_000),
        PolicyState(),
        4,
        "steady",
    ),
    # Backlog 80000 takes 40 s > 30 s: 4 + 80000 / (1000 * 10) = 12, step-limited to 4 + 4.
    ("backlog", {}, obs(4, 2000, queued=600, queued_cost=80_000), PolicyState(), 8, "backlog"),
    # Ready spare 6 * 1000 - 5000 = 1000/s clears 40000 in 40 s > 30 s, but with the 4 starting
    # ready, 10 * 1000 - 5000 = 5000/s clears it in 8 s <= backlog_drain_s 10: no more.
    (
        "starting-absorb-backlog",
        {},
        obs(10, 5000, ready=6, starting=4, queued=400, queued_cost=40_000),
        PolicyState(),
        10,
        "backlog",
    ),
    # 100000 takes 20 s > 10 s even then: 5000 / 500 + 100000 / (1000 * 10) = 20.
    (
        "starting-not-enough",
        {},
        obs(10, 5000, ready=6, starting=4, queued=900, queued_cost=100_000),
        PolicyState(),
        20,
        "backlog",
    ),
    # No rate measured or configured: hold 3 ...
    (
        "no-service-rate",
        {"service_rate_cost_per_s": None},
        obs(3, 100, service_rate=None, queued=2, queued_cost=20),
        PolicyState(),
        3,
        "no-service-rate",
    ),
    # ... but wake a model at zero for queued work.
    (
        "no-service-rate-wake",
        {"service_rate_cost_per_s": None, "min_replicas": 0},
        obs(0, 100, ready=0, service_rate=None, queued=2, queued_cost=20),
        PolicyState(),
        1,
        "no-service-rate",
    ),
    # 20000 / 500 = 40 > max 20.
    ("max", {}, obs(18, 20_000), PolicyState(), 20, "max"),
    # The queue read failed: hold whatever the load was.
    ("missing", {}, obs(6, 0, queued=None), PolicyState(), 6, "missing-metrics"),
    # Just started, no rate yet: hold, even though 6 looks like too many.
    ("no-rate-yet", {}, obs(6, None), PolicyState(), 6, "missing-metrics"),
    # ... but rises to min_replicas,
    ("no-rate-min", {"min_replicas": 2}, obs(0, None, ready=0), PolicyState(), 2, "min"),
    # ... and a model at zero wakes for its first queued job.
    (
        "no-rate-wake",
        {"min_replicas": 0},
        obs(0, None, ready=0, queued=1, queued_cost=5),
        PolicyState(),
        1,
        "wake",
    ),
    # Wants 4, but 6 was recommended 100 s ago (inside the 300 s window).
    ("stabilizing", {}, obs(6, 2000), recs((100, 6)), 6, "stabilizing"),
    # The 6 is 400 s old: needs 4, lands a band above it (ceil(4 * 1.1) = 5), and one
    # step (6 - 1) per period allows it.
    ("down-one-step", {}, obs(6, 2000), recs((400, 6)), 5, "load"),
    # Needs 2 (1000 / 500): ceil(2 * 1.1) = 3, but only one step down: 6 - 1 = 5.
    ("down-step-limited", {}, obs(6, 1000), recs((400, 6)), 5, "load"),
    # From 4, needing 2.9 (1450 / 500; 2.9 / 4 = 0.725, outside the band): lands at
    # ceil(2.9 * 1.1) = 4, not 3, where +10% noise would bounce it back up.
    ("down-lands-inside-band", {}, obs(4, 1450), recs((400, 4)), 4, "steady"),
    # Wants 4, but the oldest job waited 2000 ms > SLO 1000 ms: no scale-down.
    (
        "breach-blocks-down",
        {},
        obs(6, 2000, queued=5, queued_cost=500, oldest_wait_ms=2000),
        PolicyState(),
        6,
        "slo-breach",
    ),
    # drain 1000 s: 4000 / 500 + 200000 / (1000 * 1000) = 8.2 -> 9 < 10; spare 6000/s needs
    # 33 s > 30 s, so the backlog outlasts a cold start: the breach adds one: 11.
    (
        "breach-adds-one",
        {"backlog_drain_s": 1000},
        obs(10, 4000, queued=2000, queued_cost=200_000, p99_wait_ms=2500),
        PolicyState(),
        11,
        "slo-breach",
    ),
    # Same, but 2 replicas are already starting: they are the added capacity; hold 10.
    (
        "breach-starting-counts",
        {"backlog_drain_s": 1000},
        obs(10, 4000, ready=8, starting=2, queued=2000, queued_cost=200_000, p99_wait_ms=2500),
        PolicyState(),
        10,
        "slo-breach",
    ),
    # Scaled to zero; a first job arrives: wake to one.
    (
        "wake",
        {"min_replicas": 0, "idle_s": 60},
        obs(0, 0, ready=0, queued=1, queued_cost=10),
        PolicyState(last_active_s=NOW - 500),
        1,
        "backlog",
    ),
    # Nothing queued, running or arriving for 61 s >= idle_s 60: to zero at once.
    (
        "idle",
        {"min_replicas": 0, "idle_s": 60},
        obs(2, 0),
        PolicyState(last_active_s=NOW - 61),
        0,
        "idle",
    ),
    # Idle for only 30 s: keep one (floor 1), stepping down 2 -> 1.
    ("not-idle-yet", {"min_replicas": 0, "idle_s": 60}, obs(2, 0), recs(active_ago_s=30), 1, "min"),
    # A fresh autoscaler (no history) wants 4 of 6, but has not watched for a window yet.
    ("fresh-no-down", {}, obs(6, 2000), PolicyState(), 6, "stabilizing"),
    # A low-only backlog: 100 jobs, cost 1e6, wants far more, capped at max(2, 1) = 2.
    (
        "low-priority-cap",
        {"low_priority_max_replicas": 2},
        obs(1, 0, queued=100, queued_cost=1_000_000, queued_non_low=0),
        PolicyState(),
        2,
        "low-priority-cap",
    ),
    # Long window 2000/s, but the last 15 s ran at 4500/s > 4 ready * 1000 = 4000 they can
    # serve, and jobs wait: trusted, 4500 / 500 + 1000 / (1000 * 10) = 9.1, step-limited to
    # 4 + max(4 * 100%, 4) = 8.
    (
        "recent-rate-trusted",
        {},
        obs(4, 2000, arrival_rate_cost_recent=4500, queued=10, queued_cost=1000),
        PolicyState(),
        8,
        "backlog",
    ),
    # The same rate with nothing queued (a burst already served): the long window rules.
    (
        "recent-rate-no-queue",
        {},
        obs(4, 2000, arrival_rate_cost_recent=4500),
        PolicyState(),
        4,
        "steady",
    ),
    # 3900/s < 4000: the ready workers keep up, so it may be noise; the long window rules.
    (
        "recent-rate-ignored",
        {},
        obs(4, 2000, arrival_rate_cost_recent=3900, queued=10, queued_cost=1000),
        PolicyState(),
        4,
        "steady",
    ),
    # At zero, nothing queued or arriving (0 / 500 = 0 replicas), but 3 jobs in flight and
    # 0 ready + 0 starting + 0 draining workers hold them: wake one for them.
    (
        "orphaned-wake",
        {"min_replicas": 0, "idle_s": 60},
        obs(0, 0, ready=0, in_flight=3),
        PolicyState(last_active_s=NOW - 500),
        1,
        "orphaned-jobs",
    ),
    # The same 3, but a draining worker (1 live) still holds them: it finishes them; stay 0.
    (
        "in-flight-draining-holds",
        {"min_replicas": 0, "idle_s": 60},
        obs(0, 0, ready=0, draining=1, in_flight=3),
        PolicyState(last_active_s=NOW - 500),
        0,
        "steady",
    ),
    # Orphans and no rate yet (a restarted autoscaler): still wake to one.
    (
        "orphaned-no-rate-yet",
        {"min_replicas": 0},
        obs(0, None, ready=0, in_flight=2),
        PolicyState(),
        1,
        "orphaned-jobs",
    ),
    # Orphans and no service rate measured or configured: wake to one.
    (
        "orphaned-no-service-rate",
        {"service_rate_cost_per_s": None, "min_replicas": 0},
        obs(0, 0, ready=0, service_rate=None, in_flight=2),
        PolicyState(),
        1,
        "orphaned-jobs",
    ),
    # max_replicas 0 (a model switched off) stays off: the bound wins, 1 -> 0.
    (
        "orphaned-max-zero",
        {"min_replicas": 0, "max_replicas": 0},
        obs(0, 0, ready=0, in_flight=2),
        PolicyState(),
        0,
        "max",
    ),
    # The queue read failed: in_flight is unknown too; hold at zero.
    (
        "orphaned-missing",
        {"min_replicas": 0},
        obs(0, 0, ready=0, queued=None, in_flight=3),
        PolicyState(),
        0,
        "missing-metrics",
    ),
    # With 2 replicas the jobs are held, not orphaned; needing 0, the 3 in flight still make
    # the model active (idle 0 s < 60 s), so the floor is 1: 2 -> 1, never to 0.
    (
        "in-flight-with-workers",
        {"min_replicas": 0, "idle_s": 60},
        obs(2, 0, in_flight=3),
        recs(active_ago_s=0),
        1,
        "min",
    ),
    # -- warm pools (docs/adr/0128) ---------------------------------------------------
    # Backlog 20000 with spare 4 * 1000 - 2000 = 2000/s: gone in 10 s. Cold (30 s) that is
    # before a new replica could serve: hold. With 3 parked (a 2 s promotion) it is not.
    # The 30 s drain gives 4 + 20000 / 10000 = 6; the SLO-fast drain (max(2 s, 1 s) = 2 s)
    # gives 4 + 20000 / 2000 = 14, capped at current + parked = 7: 7.
    (
        "pool-promotes-for-backlog",
        {"warm_pool": {"size": 3}},
        obs(4, 2000, queued=100, queued_cost=20_000, parked=3),
        PolicyState(),
        7,
        "backlog",
    ),
    (
        "no-pool-holds-backlog",
        {},
        obs(4, 2000, queued=100, queued_cost=20_000),
        PolicyState(),
        4,
        "steady",
    ),
    # The step limit is max(4 * 100%, 4) = 4, but the 6 parked may all be promoted at once:
    # 9000 / 500 = 18, capped at 4 + 6 = 10 (then cold starts, the next period).
    (
        "pool-step-limit",
        {"warm_pool": {"size": 6}},
        obs(4, 9000, parked=6),
        PolicyState(),
        10,
        "load",
    ),
    ("no-pool-step-limit", {}, obs(4, 9000), PolicyState(), 8, "load"),
    # The 5 s burst rate 4000 (vs 15 s 2500, 60 s 2000) is read only while parked workers
    # wait and the oldest job waited past the SLO (1200 > 1000 ms): 4000 / 500 = 8 (its
    # small backlog's drain adds a little, and the step limit 4 + 4 holds it at 8).
    (
        "pool-reads-the-burst-rate",
        {"warm_pool": {"size": 4}},
        obs(
            4,
            2000,
            arrival_rate_cost_recent=2500,
            arrival_rate_cost_burst=4000,
            queued=5,
            queued_cost=100,
            oldest_wait_ms=1200,
            parked=4,
        ),
        PolicyState(),
        8,
        "slo-breach",
    ),
    # ... not when the oldest waited 800 ms, inside the SLO (noise, not a burst): 2000 / 500 = 4.
    (
        "pool-ignores-a-burst-nobody-waits-for",
        {"warm_pool": {"size": 4}},
        obs(
            4,
            2000,
            arrival_rate_cost_recent=2500,
            arrival_rate_cost_burst=4000,
            queued=5,
            queued_cost=100,
            oldest_wait_ms=800,
            parked=4,
        ),
        PolicyState(),
        4,
        "steady",
    ),
    # Down to the count before a burst (4), a pool's window is min(300, 60) s: 8 seen 90 s
    # ago no longer holds 6; 2000 / 500 = 4, landed a band up: 5.
    (
        "pool-short-down-window",
        {"warm_pool": {"size": 2}},
        obs(6, 2000, parked=2),
        replace(recs((90, 8)), before_burst=4),
        5,
        "load",
    ),
    # Not a burst being undone (no count before one): the usual 300 s window holds 6.
    (
        "pool-down-window-without-a-burst",
        {"warm_pool": {"size": 2}},
        obs(6, 2000, parked=2),
        recs((90, 8)),
        6,
        "stabilizing",
    ),
    ("no-pool-down-window", {}, obs(6, 2000), recs((90, 8)), 6, "stabilizing"),
    # A window of 0 (scale down at once) weighs only this period's recommendation: 4 * 1.1
    # lands at 5, one step down from 6.
    ("zero-down-window", {"scale_down_window_s": 0}, obs(6, 2000), recs((1, 8)), 5, "load"),
    # No rate yet (an autoscaler just started), but the oldest job waited 3 s > the 1 s
    # SLO and 2 workers stand by: promote them both rather than wait for a rate.
    (
        "pool-breach-before-any-rate",
        {"warm_pool": {"size": 2}},
        obs(1, None, queued=500, queued_cost=50_000, oldest_wait_ms=3000, parked=2),
        PolicyState(),
        3,
        "slo-breach",
    ),
    # ... and without a pool it waits for the rate, as before.
    (
        "no-pool-no-rate-holds",
        {},
        obs(1, None, queued=500, queued_cost=50_000, oldest_wait_ms=3000),
        PolicyState(),
        1,
        "missing-metrics",
    ),
    # -- the predictive term (docs/adr/0129) ------------------------------------------
    # Rising 10 cost/s per s, projected cold 30 s + period 5 s ahead: 2000 + 350 = 2350;
    # 2350 / 500 = 4.7 -> 5 (outside the band: 4.7 / 4 - 1 = 0.175).
    (
        "trend",
        {"predict": {"enabled": True}},
        obs(4, 2000, arrival_rate_slope=10.0),
        PolicyState(),
        5,
        "trend",
    ),
    ("trend-off", {}, obs(4, 2000, arrival_rate_slope=10.0), PolicyState(), 4, "steady"),
    # Capped at max_factor 2 x 2000 = 4000 -> 8, however steep.
    (
        "trend-capped",
        {"predict": {"enabled": True}},
        obs(4, 2000, arrival_rate_slope=500.0),
        PolicyState(),
        8,
        "trend",
    ),
    # A falling trend never adds nor removes: the load alone decides.
    (
        "trend-falling",
        {"predict": {"enabled": True}},
        obs(4, 2000, arrival_rate_slope=-50.0),
        PolicyState(),
        4,
        "steady",
    ),
    # With parked workers the lead is a promotion (2 s) + 5 s: 2000 + 10 * 7 = 2070 -> 4.14: band.
    (
        "trend-with-pool",
        {"predict": {"enabled": True}, "warm_pool": {"size": 2}},
        obs(4, 2000, arrival_rate_slope=10.0, parked=2),
        PolicyState(),
        4,
        "tolerance",
    ),
]


@pytest.mark.parametrize(
    ("overrides", "o", "state", "desired", "reason"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_decide_table(
    overrides: dict[str, Any], o: Observation, state: PolicyState, desired: int, reason: str
) -> None:
    d = decide(pol(**overrides), o, state, NOW)
    assert (d.desired, d.reason) == (desired, reason)


def test_no_observation_holds_and_keeps_state() -> None:
    state = recs((10, 5))
    d = decide(pol(), None, state, NOW)
    assert d.desired == d.current == 0 and d.reason == "missing-metrics" and d.state is state


@pytest.mark.parametrize(
    "o",
    [
        obs(2, 50_000.0, queued=5000, queued_cost=500_000.0),  # a backlog: would scale up
        obs(4, 0.0, queued=0, queued_cost=0.0),  # idle: would scale down (min 1)
        obs(0, 2000.0, queued=10, queued_cost=100.0),  # at zero: would wake
    ],
)
def test_a_paused_model_holds_its_count_whatever_it_sees(o: Observation) -> None:
    # ADR 0154: nothing is claimed while paused, so no load says what it needs.
    state = recs((10, 5), active_ago_s=1000)
    d = decide(pol(min_replicas=0, idle_s=60), replace(o, paused=True), state, NOW)
    assert (d.desired, d.reason) == (o.current, "paused") and d.state is state
    assert decide(pol(min_replicas=0, idle_s=60), o, state, NOW).desired != o.current


def test_measured_service_rate_is_remembered_while_scaled_to_zero() -> None:
    p = pol(service_rate_cost_per_s=None, min_replicas=0, idle_s=60)
    d1 = decide(p, obs(2, 4000, service_rate=2000.0), PolicyState(), NOW)
    assert d1.state.service_rate == 2000.0
    # No workers left to measure: the remembered 2000/s sizes the wake-up (4000 / 1000 = 4).
    d2 = decide(
        p, obs(0, 4000, ready=0, service_rate=None, queued=1, queued_cost=1), d1.state, NOW + 5
    )
    assert d2.desired == 4


# -- properties ---------------------------------------------------------------
observations = st.builds(
    lambda cur, starting, lam, recent, q, cost, p99, oldest, non_low: Observation(
        current=cur,
        ready=max(0, cur - starting),
        starting=min(starting, cur),
        queued=q,
        queued_cost=float(cost) if q else 0.0,
        queued_non_low=non_low,
        in_flight=0,
        arrival_rate_cost=lam,
        arrival_rate_cost_recent=recent,
        service_rate=1000.0,
        p99_wait_ms=p99,
        oldest_wait_ms=oldest if q else 0.0,
    ),
    st.integers(0, 30),
    st.integers(0, 5),
    st.floats(0, 50_000),
    st.floats(0, 50_000),
    st.integers(0, 5000),
    st.integers(1, 2_000_000),
    st.none() | st.floats(0, 60_000),
    st.floats(0, 60_000),
    st.none() | st.integers(0, 10),
)
# The same, sometimes with jobs in flight (held by the ready workers, or by nobody at zero).
observations = st.builds(
    lambda o, n: replace(o, in_flight=n), observations, st.sampled_from([0, 0, 1, 7])
)
policies = st.builds(
    lambda lo, span, low_cap, window, u, drain: pol(
        min_replicas=lo,
        max_replicas=lo + span,
        low_priority_max_replicas=low_cap,
        scale_down_window_s=window,
        target_utilization=u,
        backlog_drain_s=drain,
    ),
    st.integers(1, 5),
    st.integers(0, 20),
    st.none() | st.integers(0, 10),
    st.floats(1, 600),
    st.floats(0.2, 1.0),
    st.floats(1, 120),
)
states = st.builds(
    lambda pairs: PolicyState(
        recommendations=tuple((NOW - a, n) for a, n in pairs),
        last_active_s=NOW - 1000,
        started_s=NOW - 3600,
    ),
    st.lists(st.tuples(st.floats(0, 900), st.integers(0, 40)), max_size=5),
)


@given(policies, observations, states)
def test_bounds_hold(p: AutoscalingConfig, o: Observation, s: PolicyState) -> None:
    o = replace(o, current=min(max(o.current, p.min_replicas), p.max_replicas))
    d = decide(p, o, s, NOW)
    assert p.min_replicas <= d.desired <= p.max_replicas


@given(policies, observations, states, st.integers(0, 2_000_000), st.integers(0, 2000))
def test_more_backlog_never_fewer_replicas(
    p: AutoscalingConfig, o: Observation, s: PolicyState, extra_cost: int, extra_jobs: int
) -> None:
    more = replace(
        o, queued=(o.queued or 0) + extra_jobs, queued_cost=(o.queued_cost or 0) + extra_cost
    )
    if o.queued == 0 and more.queued and more.queued_non_low == 0:
        more = replace(more, queued_non_low=None)  # a low-only backlog appearing is capped
    assert decide(p, more, s, NOW).desired >= decide(p, o, s, NOW).desired


@given(policies, observations, st.floats(0, 1), st.integers(0, 10))
def test_no_scale_down_inside_the_window(
    p: AutoscalingConfig, o: Observation, frac: float, above: int
) -> None:
    # Some recommendation at or above the current count, made inside the window.
    s = PolicyState(
        recommendations=((NOW - frac * p.scale_down_window_s * 0.999, o.current + above),),
        started_s=NOW - 3600,
    )
    d: Decision = decide(p, o, s, NOW)
    assert d.desired >= min(o.current, p.max_replicas)


@given(
    observations,
    st.none() | st.floats(0, 50_000),
    st.booleans(),
    st.integers(1, 20),
    st.integers(1, 50),
)
def test_jobs_held_by_nobody_always_wake_a_model_at_zero(
    o: Observation, lam: float | None, measured: bool, top: int, n: int
) -> None:
    # Whatever the load, rate knowledge or history: at zero replicas with no live worker,
    # n jobs in flight bring up at least one replica (and no more than max_replicas).
    p = pol(
        min_replicas=0,
        max_replicas=top,
        idle_s=60,
        service_rate_cost_per_s=1000 if measured else None,
    )
    o = replace(
        o,
        current=0,
        ready=0,
        starting=0,
        draining=0,
        in_flight=n,
        arrival_rate_cost=lam,
        service_rate=None,
    )
    d = decide(p, o, PolicyState(last_active_s=NOW - 1000, started_s=NOW - 3600), NOW)
    assert 1 <= d.desired <= top


# About 0.1-0.4 s per 15-minute trace here (0.4 s under `make test`'s load: the
# `ci` profile's 100 took 40 s, the suite's slowest pure test): two fifths of the
# budget, the same 40 every run (derandomize, as the warm-pool property below:
# search with SLUICE_HYPOTHESIS_PROFILE=thorough, keep what it finds as an @example).
@budget(0.4, derandomize=True)
@given(st.integers(1, 10_000), st.floats(0.05, 0.25))
def test_no_flapping_on_a_noisy_steady_trace(seed: int, noise: float) -> None:
    p = pol(max_replicas=50, target_utilization=0.65)
    tr = traces.noisy(base=30.0, noise=noise, duration_s=900.0, seed=seed)
    init = simulator.initial_replicas(tr, p, 1000.0)
    r = simulator.simulate(tr, SluicePolicy(p), p, 1000.0, 30.0, init)
    assert r.flaps == 0, r.summary()
    assert r.slo_attainment >= 0.99


def test_only_a_burst_gets_the_warm_pool_short_window() -> None:
    p = pol(warm_pool={"size": 4})
    st0 = PolicyState(started_s=NOW - 3600)
    # Steady load past the band: 3450 cost/s at u = 0.5 needs 6.9 -> 7 replicas (6.9 / 6
    # is 15% over, past the 10% band), which the 60 s rate alone asks for: no burst,
    # the usual window will hold (seed 695).
    steady = decide(p, obs(6, 3450.0, parked=4), st0, NOW)
    assert steady.desired == 7 and steady.state.before_burst is None
    # A backlog asks for more than that rate does: a burst, from 6.
    burst = decide(p, obs(6, 3000.0, parked=4, queued=400, queued_cost=40_000.0), st0, NOW)
    assert burst.desired > 6 and burst.state.before_burst == 6


# 0.15-0.4 s per trace here (decisions every 2 s): two fifths of the profile's budget
# (40 in `ci`) takes 6-15 s, the same 40 every run (derandomize: a rare seed found at
# random would fail CI by chance; search with SLUICE_HYPOTHESIS_PROFILE=thorough, and
# keep what it finds as an @example).
# seed 695 / noise 0.25 once flapped: a steady-load scale-up (the 60 s rate just past
# the tolerance band) got the pool's short scale-down window and went back a minute
# after the rate eased; only a burst's replicas get that window now (policy._burst_base).
@budget(0.4, derandomize=True)
@example(seed=695, noise=0.25)
@given(st.integers(1, 10_000), st.floats(0.05, 0.25))
def test_no_flapping_on_a_noisy_steady_trace_with_a_warm_pool(seed: int, noise: float) -> None:
    # A pool shortens the scale-down window to 60 s and reads the 5 s rate: neither may
    # turn noise into scale actions back and forth. size: auto (ADR 0156): one parked per
    # serving replica for the first 10 minutes, then sized from the trace's own rises.
    p = pol(max_replicas=50, target_utilization=0.65, period_s=2.0, warm_pool={"size": "auto"})
    tr = traces.noisy(base=30.0, noise=noise, duration_s=900.0, seed=seed)
    init = simulator.initial_replicas(tr, p, 1000.0)
    r = simulator.simulate(tr, SluicePolicy(p), p, 1000.0, 30.0, init)
    assert r.flaps == 0, r.summary()
    assert r.slo_attainment >= 0.99
