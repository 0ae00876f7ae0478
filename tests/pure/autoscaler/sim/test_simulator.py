"""The simulator's queueing model, the baselines and the CLI."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.observation import Observation
from autoscaler.policy import Decision
from autoscaler.sim import simulator, traces
from autoscaler.sim.controllers import Fixed, Ongoing, QueueLength, SluicePolicy, parse_policy
from sluice import waits
from sluice.cli import app
from sluice.config import AutoscalingConfig
from sluice.errors import ConfigError

ROOT = Path(__file__).resolve().parents[4]
SIM_CONFIG = ROOT / "bench" / "autoscaler_sim.yaml"
P = AutoscalingConfig(
    min_replicas=1,
    max_replicas=64,
    p99_wait_slo_ms=1000,
    cold_start_s=30,
    service_rate_cost_per_s=1000,
)


def _trace(rows: list[tuple[float, float]], duration_s: float = 60.0) -> traces.Trace:
    return traces.Trace("t", [r[0] for r in rows], [r[1] for r in rows], duration_s)


def test_fifo_queue_arithmetic_with_one_worker() -> None:
    # One worker at 1000 units/s: job A (500 units) runs 0-0.5 s, B (arrives 0.1 s) waits
    # 0.4 s, C (arrives 0.2 s) waits until 1.0 s: 0.8 s.
    tr = _trace([(0.0, 500), (0.1, 500), (0.2, 100)])
    r = simulator.simulate(tr, Fixed(1), P, 1000.0, 30.0, initial=1)
    assert r.jobs == 3 and r.mean_wait_ms == pytest.approx((0 + 400 + 800) / 3, abs=0.1)
    assert r.slo_attainment == 1.0
    # Replica-seconds: one worker for the trace's 60 s (the queue was empty at its end).
    assert r.replica_seconds == pytest.approx(60.0)


def test_cold_start_delays_new_capacity() -> None:
    # Nothing running, 20 jobs of 100 units at t=0..1.9 s; fixed:2 asks at the first tick
    # (5 s) and its workers serve from 35 s: every job waits over 30 s.
    tr = _trace([(i * 0.1, 100) for i in range(20)])
    r = simulator.simulate(tr, Fixed(2), P, 1000.0, 30.0, initial=0)
    assert r.slo_attainment == 0.0 and r.p99_wait_ms > 30_000


def test_wait_histogram_matches_the_claim_script_buckets() -> None:
    assert waits.slot(5) == 0 and waits.slot(5.1) == 1 and waits.slot(70_000) == 13
    counts = [0] * len(waits.LABELS)
    counts[waits.slot(40)] = 98
    counts[waits.slot(900)] = 2
    assert waits.quantile_ms(counts) == 1000  # the 99th of 100 is in the 1000 ms bucket
    assert waits.quantile_ms([0] * len(waits.LABELS)) is None
    assert waits.merge([{"50": "3", "inf": 1, "count": 4}])[waits.slot(50)] == 3


def test_sluice_policy_beats_the_baselines_on_a_step() -> None:
    tr = traces.step(duration_s=1200.0)
    init = simulator.initial_replicas(tr, P, 1000.0)
    ours = simulator.simulate(tr, SluicePolicy(P), P, 1000.0, 30.0, init)
    orc = simulator.simulate(tr, simulator.oracle(tr, P, 1000.0, 30.0), P, 1000.0, 30.0, init)
    assert orc.slo_attainment >= 0.999  # the oracle is a fair yardstick: it meets the SLO
    for base in (QueueLength(P), Ongoing(P)):
        other = simulator.simulate(tr, base, P, 1000.0, 30.0, init)
        assert ours.slo_attainment > other.slo_attainment
        assert ours.replica_seconds < other.replica_seconds
    assert ours.replica_seconds <= 1.3 * orc.replica_seconds


def test_parse_policy_and_trace_specs(tmp_path: Path) -> None:
    assert isinstance(parse_policy("fixed:3", P), Fixed)
    assert parse_policy("queue-length:2", P).target == 2.0  # type: ignore[attr-defined]
    with pytest.raises(ConfigError):
        parse_policy("hpa", P)
    with pytest.raises(ConfigError):
        traces.resolve("step:-1")
    csv = tmp_path / "t.csv"
    csv.write_text("time_s,cost\n10.5,20\n10.0,30\n")
    tr = traces.resolve(str(csv))
    assert tr.times_s == [0.0, 0.5] and tr.costs == [30.0, 20.0]
    (tmp_path / "bad.csv").write_text("when,size\n1,2\n")
    with pytest.raises(ConfigError, match="time_s"):
        traces.resolve(str(tmp_path / "bad.csv"))


def test_simulate_cli_writes_json_and_plot(tmp_path: Path) -> None:
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    res = CliRunner().invoke(
        app,
        [
            "simulate",
            "--config",
            str(SIM_CONFIG),
            "--trace",
            "spike:1.5",
            "--policy",
            "sluice,fixed:9",
            "--capacity-cost-per-s",
            "100000",
            "--json",
            str(out),
            "--plot",
            str(png),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    names = [r["policy"] for r in data["results"]]
    assert names == ["oracle", "sluice", "fixed:9"]
    assert data["oracle_replica_seconds"] == data["results"][0]["replica_seconds"]
    assert data["capacity_cost_per_s"] == 100000
    assert png.stat().st_size > 10_000
    assert "SLO met" in res.output


@dataclass
class _Recording:
    """Sluice's policy, keeping what it saw and decided."""

    inner: SluicePolicy
    name: str = "sluice"
    seen: list[tuple[float, Observation, Decision]] = field(default_factory=list)

    def decide(self, obs: Observation, now_s: float) -> Decision:
        d = self.inner.decide(obs, now_s)
        self.seen.append((now_s, obs, d))
        return d


def _overload(duration_s: float = 300.0) -> traces.Trace:
    # 1600 cost units/s: 160-unit jobs every 0.1 s.
    n = int(duration_s * 10)
    return _trace([(i * 0.1, 160.0) for i in range(n)], duration_s)


def test_the_completion_rate_is_derived_as_the_observer_derives_it() -> None:
    # One worker at 1000 units/s under a 1600 units/s load: with a backlog it completes
    # 1000 units/s, and the recent (15 s) and long (60 s) completion rates say so once
    # the samples (one per decision, from 5 s) cover half their window, as the
    # observer's do (None before).
    p = P.model_copy(update={"max_replicas": 1})
    rec = _Recording(SluicePolicy(p))
    simulator.simulate(_overload(120.0), rec, p, 1000.0, 30.0, initial=1)
    by_t = {round(t): o for t, o, _ in rec.seen}  # a decision every period_s (5 s)
    assert by_t[10].completion_rate_cost_recent is None  # 10 - 5 s < half of 15 s
    assert by_t[15].completion_rate_cost_recent == pytest.approx(1000.0, rel=0.05)
    assert by_t[30].completion_rate_cost is None  # 30 - 5 s < half of 60 s
    assert by_t[60].completion_rate_cost == pytest.approx(1000.0, rel=0.05)


def test_a_replay_shows_the_saturation_guard_capping_a_scale_up() -> None:
    # The replicas share 1000 units/s (one replica's worth of cores): more replicas add
    # no drain rate. The guard's probe (1 -> 4 at 30 s, ready at 60 s, settled 15 s)
    # reads no gain and caps the model, as it would live: no scale-up after that. With
    # the guard off the same replay keeps adding replicas for nothing.
    tr, cold = _overload(), 30.0
    guarded = _Recording(SluicePolicy(P))
    r = simulator.simulate(tr, guarded, P, 1000.0, cold, 1, capacity_cost_per_s=1000.0)
    capped = [(t, d) for t, _, d in guarded.seen if d.reason == "saturated"]
    assert capped and all(d.desired <= d.current for _, d in capped)
    first_cap = min(t for t, _, d in guarded.seen if d.state.saturation.cap is not None)
    assert all(d.desired <= d.current for t, _, d in guarded.seen if t >= first_cap)
    off = P.model_copy(update={"saturation_hold_s": 0})
    r_off = simulator.simulate(
        tr, SluicePolicy(off), off, 1000.0, cold, 1, capacity_cost_per_s=1000.0
    )
    assert r.max_replicas < r_off.max_replicas
