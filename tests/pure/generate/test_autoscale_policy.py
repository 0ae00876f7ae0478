"""A generative model's scaling (ADR 0149): replicas from slot demand, the TTFT SLO,
tokens/s from heartbeats, and what the decision record shows. Pure: no Redis."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from autoscaler import generate_policy
from autoscaler.decisions import entry
from autoscaler.observation import GenerateSignals, Observation
from autoscaler.observe import generate_signals
from autoscaler.policy import PolicyState, decide
from sluice.config import AutoscalingConfig
from sluice.registry import WorkerInfo
from tests.conftest import budget
from tests.factories import worker_info

P = AutoscalingConfig(
    min_replicas=1,
    max_replicas=10,
    target_utilization=0.75,
    ttft_slo_ms=500.0,
    service_rate_cost_per_s=1000.0,
    saturation_hold_s=0,
    cold_start_s=30.0,
)


def gen_worker(slots: int, busy: int, tokens_per_s: float, **kw: Any) -> WorkerInfo:
    """A generative worker's heartbeat (registry.WorkerInfo's slot fields)."""
    return worker_info(slots=slots, slots_busy=busy, tokens_per_s=tokens_per_s, **kw)


def obs(
    current: int = 2,
    busy: int = 0,
    queued: int = 0,
    slots: int = 16,
    tps: float | None = None,
    ttft_p99: float | None = None,
    **kw: Any,
) -> Observation:
    g = GenerateSignals(
        slots=slots,
        slots_busy=busy,
        slots_total=slots * current,
        ttft_p99_ms=ttft_p99,
        tokens_per_s=tps,
        expected_output_tokens=64.0,
    )
    return Observation(
        current=current,
        ready=kw.pop("ready", current),
        queued=queued,
        queued_cost=float(queued * 100),
        in_flight=busy,
        arrival_rate_cost=kw.pop("arrival_rate_cost", 100.0),
        generate=g,
        **kw,
    )


def test_replicas_follow_active_sequences_over_slots_at_target_utilization() -> None:
    # 2 replicas x 16 slots, 30 busy: 30 / (16 x 0.75) = 2.5 -> 3.
    d = decide(P, obs(busy=30), PolicyState(), 0.0)
    assert (d.desired, d.reason) == (3, "load")
    assert d.needed == 30 / 12


def test_waiting_jobs_count_unless_the_ready_replicas_admit_them_first() -> None:
    # 32 busy + 16 waiting: 48 / 12 = 4 replicas, with no tokens/s measured.
    assert decide(P, obs(busy=32, queued=16), PolicyState(), 0.0).desired == 4
    # Measured 2,000 tokens/s per replica: 16 x 64 / (2000 x 2) = 0.26 s to admit them
    # all, far inside a 30 s cold start: the waiting jobs ask for nothing more.
    d = decide(P, obs(busy=24, queued=16, tps=2000.0), PolicyState(), 0.0)
    assert (d.desired, d.reason) == (2, "steady")
    assert generate_policy.drain_s(obs(busy=24, queued=16, tps=2000.0)) == 16 * 64 / 4000
    # 20 tokens/s: 60 x 64 / 40 = 96 s to admit them, past a cold start: (32 + 60) / 12.
    d = decide(P, obs(busy=32, queued=60, tps=20.0), PolicyState(), 0.0)
    assert (d.desired, d.needed) == (6, 92 / 12)  # 8 wanted, a step of 4 at a time


def test_a_ttft_breach_with_jobs_waiting_adds_a_replica_and_blocks_scale_down() -> None:
    # Few busy slots would scale down; TTFT p99 over the SLO with jobs waiting holds
    # and adds one (nothing is starting).
    d = decide(P, obs(busy=4, queued=1, tps=2000.0, ttft_p99=900.0), PolicyState(), 0.0)
    assert (d.desired, d.reason) == (3, "ttft-breach")
    # Nothing waits: the slow first tokens are over, no breach.
    d = decide(P, obs(busy=4, queued=0, ttft_p99=900.0), PolicyState(), 0.0)
    assert d.reason != "ttft-breach"
    # Capacity is already starting: hold, add nothing more.
    o = obs(busy=4, queued=1, tps=2000.0, ttft_p99=900.0, ready=1, starting=1)
    d = decide(P, o, PolicyState(), 0.0)
    assert (d.desired, d.reason) == (2, "ttft-breach")


def test_an_idle_generative_model_scales_down_after_its_window() -> None:
    state = decide(P, obs(current=3, busy=0), PolicyState(), 0.0).state
    d = decide(P, obs(current=3, busy=0), state, P.scale_down_window_s + 1)
    assert d.desired == 2 and d.direction == "down"


def test_signals_from_heartbeats_and_the_ttft_histogram() -> None:
    workers = [
        gen_worker(16, 10, 900.0, id="a"),
        gen_worker(16, 16, 1100.0, id="b"),
        gen_worker(16, 5, 0.0, id="c", state="starting"),  # not serving
    ]
    counts = [0] * 16
    counts[3] = 98  # 50 ms
    counts[8] = 2
    g = generate_signals(
        workers, in_flight=20, slots=8, expected_output_tokens=64, ttft_counts=counts
    )
    assert (g.slots, g.slots_busy, g.slots_total) == (16, 26, 32)
    assert g.tokens_per_s == 1000.0 and g.occupancy == 26 / 32
    assert g.ttft_p50_ms is not None and g.ttft_p99_ms is not None
    assert g.ttft_p50_ms < g.ttft_p99_ms
    # No heartbeat reports slots yet: the configured slots, jobs in flight as busy.
    g = generate_signals(
        [worker_info()], in_flight=7, slots=8, expected_output_tokens=64, ttft_counts=None
    )
    assert (g.slots, g.slots_busy, g.slots_total, g.occupancy) == (8, 7, 0, None)
    assert g.ttft_p99_ms is None and g.tokens_per_s is None


def test_the_decision_record_shows_the_generative_inputs() -> None:
    o = obs(busy=30, tps=1234.56, ttft_p99=250.0)
    e = entry(decide(P, o, PolicyState(), 0.0), o, at_ms=1)
    assert (e.slots_busy, e.slots_total, e.ttft_p99_ms, e.tokens_per_s) == (30, 32, 250.0, 1234.6)
    plain = replace(o, generate=None)
    e = entry(decide(P, plain, PolicyState(), 0.0), plain, at_ms=1)
    assert (e.slots_busy, e.slots_total, e.ttft_p99_ms, e.tokens_per_s) == (None,) * 4


@budget(0.5)  # cheap examples, but decide() is called twice per example
@given(
    current=st.integers(0, 8),
    queued=st.integers(0, 500),
    in_flight=st.integers(0, 100),
    rate=st.floats(0, 5000),
    p99=st.one_of(st.none(), st.floats(1, 10_000)),
)
def test_an_embedding_model_decides_as_without_the_generative_branch(
    current: int, queued: int, in_flight: int, rate: float, p99: float | None
) -> None:
    """generate=None takes the unchanged cost path: the same decision as an
    observation that never heard of generation, whatever ttft_slo_ms says."""
    o = Observation(
        current=current,
        ready=current,
        queued=queued,
        queued_cost=queued * 50.0,
        in_flight=in_flight,
        arrival_rate_cost=rate,
        p99_wait_ms=p99,
    )
    a = decide(P, o, PolicyState(), 100.0)
    b = decide(P.model_copy(update={"ttft_slo_ms": 1.0}), o, PolicyState(), 100.0)
    assert (a.desired, a.reason, a.needed) == (b.desired, b.reason, b.needed)
    assert a.reason != "ttft-breach"
