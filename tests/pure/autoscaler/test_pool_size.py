"""warm_pool.size: auto (ADR 0156): the history of rises, the percentile, the bounds,
the idle size, and the simulator's pool following the size."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler import pool_size
from autoscaler.observation import Observation
from autoscaler.pool_size import PoolState
from autoscaler.sim import simulator, traces
from autoscaler.sim.controllers import SluicePolicy
from sluice.config import AutoscalingConfig, WarmPoolConfig
from sluice.records import PoolMinute

AUTO = WarmPoolConfig(size="auto", cost_fraction=0.1, history_min_s=600, percentile=0.99)
# mu 1000 at target 0.5: a need of one replica is 500 cost units/s.
P = AutoscalingConfig(
    min_replicas=1,
    max_replicas=20,
    target_utilization=0.5,
    service_rate_cost_per_s=1000,
    warm_pool=AUTO,
)


def _minutes(
    rises: list[float], serving: float = 4.0, idle: list[float] | None = None
) -> PoolState:
    idle = idle or [0.0] * len(rises)
    ms = [
        PoolMinute(60.0 * i, r, ir, serving, 1)
        for i, (r, ir) in enumerate(zip(rises, idle, strict=True))
    ]
    return PoolState(tuple(ms))


def test_a_rise_is_measured_against_the_lowest_need_within_one_cold_start() -> None:
    # Needs 2, 2, 6 at 0, 10, 20 s with 2 serving: at 20 s the rise is 6 x share 1 - 2 = 4.
    # At 75 s (a new minute) the 0-20 s minute closes with that rise; the need 2 at 75 s
    # is measured against 60-75 s only (cold start 30 s): 6 at 20 s has left the span.
    st = PoolState()
    for t, n in ((0.0, 2.0), (10.0, 2.0), (20.0, 6.0)):
        st, closed = pool_size.observe(st, t, n, 2, 30.0, 1.0)
        assert closed is None
    st, closed = pool_size.observe(st, 75.0, 2.0, 2, 30.0, 1.0)
    assert closed == PoolMinute(0.0, 4.0, 0.0, 6.0, 3)
    assert st.open is not None and st.open.rise == 0.0
    # From idle (the lowest need under half a replica), the rise is also an idle rise.
    st, _ = pool_size.observe(st, 80.0, 0.0, 1, 30.0, 1.0)
    st, _ = pool_size.observe(st, 85.0, 5.0, 1, 30.0, 1.0)
    assert st.open is not None and st.open.idle_rise == 4.0


@pytest.mark.parametrize(
    ("rises", "cur", "need", "size", "reason"),
    [
        # 20 minutes, the largest rise 5.2: the 0.99 percentile of 20 is the largest -> 6.
        ([1.0] * 19 + [5.2], 4, 3.0, 6, "history"),
        # A higher rise, but only 16 replicas could still be promoted (max 20, 4 serving).
        ([1.0] * 19 + [30.0], 4, 3.0, 16, "max-replicas"),
        # 1 serving now, but 4 on average over the window: the cap (0.5 x 4 / 0.1 = 20) holds.
        ([1.0] * 19 + [9.0], 1, 3.0, 9, "history"),
    ],
)
def test_size_from_history_and_bounds(
    rises: list[float], cur: int, need: float, size: int, reason: str
) -> None:
    st = _minutes(rises)
    got = pool_size.size(P, st, 60.0 * len(rises), cur, need)
    assert (got.size, got.reason) == (size, reason)


def test_the_cost_cap_and_the_room_bound_the_size() -> None:
    st = _minutes([1.0] * 19 + [9.0], serving=1.0)
    # 0.5 x a mean of 1 serving / 0.1 = at most 5 parked.
    got = pool_size.size(P, st, 1200.0, 1, 3.0)
    assert (got.size, got.reason, got.rise) == (5, "cost-cap", 9.0)
    got = pool_size.size(P, st, 1200.0, 1, 3.0, room=2)
    assert (got.size, got.reason) == (2, "room")


def test_before_enough_history_the_initial_size_then_one_per_serving_replica() -> None:
    st = _minutes([8.0] * 5)  # 5 minutes < history_min_s (10)
    assert pool_size.size(P, st, 300.0, 3, 3.0) == pool_size.PoolSize(3, "initial", 0.0)
    fixed = P.model_copy(update={"warm_pool": AUTO.model_copy(update={"initial_size": 2})})
    assert pool_size.size(fixed, st, 300.0, 3, 3.0).size == 2


def test_while_idle_the_pool_is_what_a_burst_from_idle_needed() -> None:
    # At load, rises of 9; from idle, 3: idle now (need 0.1) -> 3; at load -> 9.
    st = _minutes([9.0] * 10 + [3.0] * 10, idle=[0.0] * 10 + [3.0] * 10)
    assert (pool_size.size(P, st, 1200.0, 1, 0.1).size, "idle") == (3, "idle")
    assert pool_size.size(P, st, 1200.0, 4, 3.0).size == 9


def test_a_fixed_size_is_kept() -> None:
    p = P.model_copy(update={"warm_pool": WarmPoolConfig(size=4)})
    assert pool_size.size(p, PoolState(), 0.0, 1, 0.0) == pool_size.PoolSize(4, "fixed", 0.0)


def test_the_window_forgets_old_minutes_and_records_round_trip() -> None:
    st = _minutes([1.0, 2.0, 3.0])
    assert [m.rise for m in pool_size.forget(st, 150.0, 100.0).minutes] == [2.0, 3.0]
    m = PoolMinute(60.0, 1.25, 0.0, 8.0, 12)
    assert PoolMinute.from_json(m.to_json()) == m
    with pytest.raises(ValueError):
        PoolMinute.from_json('{"start_s": 1}')


def test_step_sizes_from_the_short_rate() -> None:
    obs = Observation(current=2, arrival_rate_cost=1000.0, arrival_rate_cost_recent=3000.0)
    st, got, closed = pool_size.step(P, PoolState(), 0.0, obs, 1000.0, 30.0, 2)
    assert closed is None and st.recent == ((0.0, 6.0, 2),)
    assert (got.size, got.reason) == (2, "initial")


def test_the_simulated_pool_follows_the_auto_size() -> None:
    """On the from-idle trace with size: auto (decisions every 2 s), the pool starts at
    one per serving replica, grows from the history once it covers 10 minutes, and the
    run meets a burst from idle from the pool (promotions), not from cold starts only."""
    p = P.model_copy(update={"period_s": 2.0, "target_utilization": 0.65, "max_replicas": 64})
    tr = traces.resolve("from-idle")
    ctl = SluicePolicy(p)
    sizes: list[tuple[float, int]] = []
    decide = ctl.decide

    def spy(obs: Observation, now_s: float):  # type: ignore[no-untyped-def]
        d = decide(obs, now_s)
        if d.pool is not None:
            sizes.append((now_s, d.pool.size))
        return d

    ctl.decide = spy  # type: ignore[method-assign]
    r = simulator.simulate(tr, ctl, p, 1000.0, 30.0, simulator.initial_replicas(tr, p, 1000.0))
    assert sizes[0][1] == 1  # one serving replica at the start: one parked
    late = max(n for t, n in sizes if t > 900)
    assert late >= 4  # a burst of 24 jobs/s needs ~4.5 replicas: from idle, 1 serving
    assert r.promotions >= late


def _wake_obs(**kw: object) -> Observation:
    base: dict[str, object] = dict(
        current=1,
        ready=1,
        parked=4,
        queued=10,
        queued_cost=1500.0,
        in_flight=1,
        arrival_rate_cost=50.0,
        arrival_rate_cost_recent=400.0,
    )
    return Observation(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "desired", "reason"),
    [
        # Idle before (the 60 s rate needs 0.1 replica), 1.5 s of work queued for the one
        # ready worker (more than half the 1 s SLO): the whole pool of 4 is promoted.
        ({}, 5, "pool-wake"),
        # One small job queued (0.2 s of work): the ready worker takes it, no wake.
        ({"queued": 1, "queued_cost": 200.0}, 1, "steady"),
        # No parked workers: nothing to wake (the usual rules answer, later).
        ({"parked": 0}, 1, "steady"),
    ],
)
def test_a_burst_from_idle_promotes_the_whole_pool(
    kw: dict[str, object], desired: int, reason: str
) -> None:
    from autoscaler.policy import PolicyState, decide

    p = P.model_copy(update={"target_utilization": 0.65})
    d = decide(p, _wake_obs(**kw), PolicyState(started_s=0.0), 1000.0)
    assert (d.desired, d.reason) == (desired, reason)


def test_a_burst_whose_arrivals_stopped_goes_back_at_once() -> None:
    from autoscaler.policy import PolicyState, decide

    p = P.model_copy(update={"target_utilization": 0.65, "scale_down_max_step": 8})
    # 6 serving after a burst from 1; the 60 s rate still remembers it (needs 5), but
    # nothing arrived for 15 s and nothing waits or runs: back to 1 now, not after the
    # pool's 60 s window.
    quiet = Observation(
        current=6,
        ready=6,
        parked=4,
        queued=0,
        queued_cost=0.0,
        arrival_rate_cost=3000.0,
        arrival_rate_cost_recent=0.0,
    )
    st = PolicyState(started_s=0.0, before_burst=1, recommendations=((995.0, 6),))
    d = decide(p, quiet, st, 1000.0)
    assert (d.desired, d.reason) == (1, "burst-over")
    # At 1, with nothing arriving, the minute's rate asks for no scale-up.
    at_one = decide(p, replace(quiet, current=1, ready=1), d.state, 1001.0)
    assert at_one.desired == 1
    # Without a pool the usual window holds.
    bare = p.model_copy(update={"warm_pool": WarmPoolConfig()})
    assert decide(bare, quiet, st, 1000.0).desired == 6
