"""The simulator's warm pool: promotion timing, refills, parking, and its cost."""

from __future__ import annotations

import pytest

from autoscaler.observation import Observation
from autoscaler.policy import Decision
from autoscaler.sim import simulator, traces
from autoscaler.sim.controllers import Fixed, Oracle, SluicePolicy
from sluice.config import AutoscalingConfig, WarmPoolConfig

POOL = WarmPoolConfig(size=2, promote_s=2.0, cost_fraction=0.1)
P = AutoscalingConfig(
    min_replicas=1, max_replicas=16, cold_start_s=30, service_rate_cost_per_s=1000, period_s=5
)
PP = P.model_copy(update={"warm_pool": POOL})


def _trace(rows: list[tuple[float, float]], duration_s: float = 100.0) -> traces.Trace:
    return traces.Trace("t", [r[0] for r in rows], [r[1] for r in rows], duration_s)


def test_parked_workers_cost_their_share_and_serve_nothing() -> None:
    # One serving worker and two parked for the whole run: the run's last event is the
    # tick at the trace's end (100 s), so 100 + 2 * 0.1 * 100 = 120 replica-seconds. Two jobs
    # of 1 s at t=1: the second waits for the one serving worker (parked ones never serve).
    tr = _trace([(1.0, 1000), (1.0, 1000)])
    r = simulator.simulate(tr, Fixed(1), PP, 1000.0, 30.0, initial=1)
    assert r.replica_seconds == pytest.approx(100 + 0.2 * 100)
    assert r.pool_seconds == pytest.approx(0.2 * 100)
    assert r.mean_wait_ms == pytest.approx(500.0) and r.promotions == 0


def test_a_scale_up_promotes_parked_workers_then_refills_the_pool() -> None:
    # Fixed(3) from 1 at the first tick (5 s): both parked promoted, serving at 7 s;
    # refills start cold and are parked at 35 s. Three 1 s jobs at 5.5 s: one runs at
    # once, one waits for it (1 s), one for the promoted workers at 7 s (1.5 s).
    tr = _trace([(5.5, 1000), (5.5, 1000), (5.5, 1000)])
    r = simulator.simulate(tr, Fixed(3), PP, 1000.0, 30.0, initial=1)
    assert r.promotions == 2
    assert r.mean_wait_ms == pytest.approx((0 + 1000 + 1500) / 3, abs=0.1)
    # Serving: 1 for 0-5 s, 3 for 5-100 s = 290. The pool: 2 parked at 0.1 for 0-5 s and
    # 35-100 s (14), 2 refilling in full for 5-35 s (60).
    assert r.pool_seconds == pytest.approx(1.0 + 60.0 + 13.0)
    assert r.replica_seconds == pytest.approx(290 + 74)
    # Without a pool the new workers serve from 35 s: the one worker runs all three.
    cold = simulator.simulate(tr, Fixed(3), P, 1000.0, 30.0, initial=1)
    assert cold.mean_wait_ms == pytest.approx((0 + 1000 + 2000) / 3, abs=0.1)


def test_a_scale_down_parks_a_worker_while_a_refill_still_starts() -> None:
    # 3 at 5 s (two promoted, two refills starting), back to 1 at 10 s: the two idle
    # workers are parked and the two refills cancelled, so the pool is warm at once.
    sched = Oracle(lambda t: 3 if t < 10 else 1, lead_s=0.0)
    r = simulator.simulate(_trace([(0.5, 10)]), sched, PP, 1000.0, 30.0, initial=1)
    assert r.promotions == 2
    # Serving: 1 (0-5) + 3 (5-10) + 1 (10-100) = 5 + 15 + 90 = 110. Pool: 0.2 * 5 for
    # 0-5 s, 2 refills in full 5-10 s (10), then 2 parked at 0.1 for 10-100 s (18).
    assert r.pool_seconds == pytest.approx(1.0 + 10.0 + 18.0)
    assert r.replica_seconds == pytest.approx(110 + 29)


def test_a_cancelled_promotion_goes_back_to_the_pool() -> None:
    # A promotion longer than a period (8 s): asked at 5 s, cancelled at 10 s while still
    # promoting, both go back to the pool.
    pp = P.model_copy(update={"warm_pool": POOL.model_copy(update={"promote_s": 8.0})})
    sched = Oracle(lambda t: 3 if t < 10 else 1, lead_s=0.0)
    r = simulator.simulate(_trace([(0.5, 10)]), sched, pp, 1000.0, 30.0, initial=1)
    # The pool is over its size with two refills starting: they are cancelled at 10 s.
    # Serving: 1 (0-5) + 3 (5-10) + 1 (10-100) = 110; pool: 0.2 * 5 + 10 + 0.2 * 90 = 29.
    assert r.pool_seconds == pytest.approx(29.0)
    assert r.replica_seconds == pytest.approx(139.0)


def test_a_warm_pool_meets_the_slo_on_a_spike_where_cold_starts_miss_it() -> None:
    # The 3x spike at 30 s cold start: without a pool the policy misses the SLO for a
    # tenth of the jobs; a pool sized for the burst (12, docs/benchmarks/autoscaler.md)
    # with 2 s decisions meets 99% at a cost near the oracle's.
    tr = traces.spike()
    p = P.model_copy(update={"max_replicas": 64, "target_utilization": 0.65})
    pooled = p.model_copy(update={"warm_pool": WarmPoolConfig(size=12), "period_s": 2.0})
    init = simulator.initial_replicas(tr, p, 1000.0)
    bare = simulator.simulate(tr, SluicePolicy(p), p, 1000.0, 30.0, init)
    warm = simulator.simulate(tr, SluicePolicy(pooled), pooled, 1000.0, 30.0, init)
    orc = simulator.simulate(tr, simulator.oracle(tr, p, 1000.0, 30.0), p, 1000.0, 30.0, init)
    assert bare.slo_attainment < 0.95
    assert warm.slo_attainment >= 0.99
    assert warm.replica_seconds <= 1.3 * orc.replica_seconds
    assert warm.promotions >= 11


class _Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.slopes: list[tuple[float, float | None]] = []

    def decide(self, obs: Observation, now_s: float) -> Decision:
        self.slopes.append((now_s, obs.arrival_rate_slope))
        return Decision(obs.current, obs.current, "fixed", float(obs.current))


def test_the_trend_is_the_rate_slope_over_the_window() -> None:
    # Arrivals at a rate of t jobs/s (cost 1 each): the cost rate rises 1 unit/s per s.
    times = [k + i / k for k in range(1, 300) for i in range(k)]
    tr = _trace([(t, 1.0) for t in times], duration_s=300.0)
    rec = _Recorder()
    simulator.simulate(tr, rec, P, 1000.0, 30.0, initial=1)  # predict.window_s = 120
    assert all(s is None for t, s in rec.slopes if t < 120)
    later = [s for t, s in rec.slopes if 125 <= t <= 295]
    assert later and all(s == pytest.approx(1.0, abs=0.05) for s in later)
