"""The saturation guard (autoscaler/saturation.py) inside decide(): a scale-up
that did not raise the measured drain rate stops further scale-ups, with the
reason "saturated"; one that did raise it changes nothing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from autoscaler.observation import Observation
from autoscaler.policy import Decision, PolicyState, decide
from autoscaler.saturation import MIN_GAIN
from sluice.config import AutoscalingConfig

POLICY = AutoscalingConfig(
    min_replicas=1,
    max_replicas=8,
    service_rate_cost_per_s=100.0,
    scale_down_window_s=60,
    cold_start_s=5,
    scale_up_max_step=1,
    scale_up_max_percent=100,
)


def backlogged(current: int, ready: int, drain: float, **kw: object) -> Observation:
    """A deep backlog that arrives faster than anything drains it."""
    fields: dict[str, object] = {
        "current": current,
        "ready": ready,
        "starting": current - ready,
        "queued": 5_000,
        "queued_cost": 500_000.0,
        "arrival_rate_cost": 1_000.0,
        "arrival_rate_cost_recent": 1_000.0,
        "completion_rate_cost": drain,
        "completion_rate_cost_recent": drain,
        "service_rate": 100.0,
        **kw,
    }
    return Observation(**fields)  # type: ignore[arg-type]


def scale_up_then(drain_after: float, policy: AutoscalingConfig = POLICY) -> list[Decision]:
    """1 replica draining 100/s asks for more (up to 2 in one step); 2 become ready at
    t=10 and drain ``drain_after``; t=30 is past the settle window (15 s)."""
    first = decide(policy, backlogged(1, 1, 100.0), PolicyState(), 0.0)
    assert first.desired == 2, first  # _limit_up: 1 -> 2
    steps = [(t, backlogged(2, 2 if t >= 10 else 1, drain_after)) for t in (5, 10, 20, 30, 40)]
    state, out = first.state, [first]
    for now, obs in steps:
        d = decide(policy, obs, state, now)
        out.append(d)
        state = d.state
    return out


def test_a_scale_up_that_lowered_the_drain_rate_caps_at_the_old_count() -> None:
    ds = scale_up_then(drain_after=45.0)  # 2 workers on 2 cores with 2 threads each
    last = ds[-1]
    assert last.state.saturation.cap == 1 and "100 -> 45" in last.state.saturation.why
    # Down to the old count like any scale-down: after the stabilisation window.
    assert last.desired == 2 and last.reason == "stabilizing"
    after = decide(POLICY, backlogged(2, 2, 45.0), last.state, 40.0 + 61)
    assert (after.desired, after.reason) == (1, "saturated")


def test_a_scale_up_with_no_gain_holds_where_it_is() -> None:
    ds = scale_up_then(drain_after=105.0)  # +5 where +100 was expected
    last = ds[-1]
    assert last.reason == "saturated" and last.desired == 2
    assert last.state.saturation.cap == 2


def test_a_scale_up_that_added_its_rate_carries_on() -> None:
    ds = scale_up_then(drain_after=195.0)
    assert ds[-1].state.saturation.cap is None
    assert ds[-1].desired > 2 and ds[-1].reason != "saturated"


def test_the_cap_lapses_after_the_hold() -> None:
    policy = POLICY.model_copy(update={"saturation_hold_s": 20})
    ds = scale_up_then(drain_after=45.0, policy=policy)
    state = ds[-1].state
    later = decide(policy, backlogged(2, 2, 45.0), state, 1_000.0)
    assert later.reason != "saturated" and later.desired > 2  # measures again


def test_off_when_the_hold_is_zero() -> None:
    ds = scale_up_then(drain_after=45.0, policy=POLICY.model_copy(update={"saturation_hold_s": 0}))
    assert all(d.reason != "saturated" for d in ds) and ds[-1].desired > 2


def test_no_backlog_no_reading() -> None:
    """Without waiting jobs the completion rate is the arrival rate, not capacity."""
    first = decide(POLICY, backlogged(1, 1, 100.0), PolicyState(), 0.0)
    assert first.state.saturation.probe is not None
    empty = backlogged(2, 2, 45.0, queued=0, queued_cost=0.0, arrival_rate_cost=45.0)
    d = decide(POLICY, empty, first.state, 30.0)
    assert d.state.saturation.probe is None and d.state.saturation.cap is None


@given(
    drain_after=st.floats(0, 400),
    before=st.floats(10, 400),
)
def test_capped_exactly_when_the_gain_is_below_the_bound(drain_after: float, before: float) -> None:
    policy = POLICY.model_copy(update={"service_rate_cost_per_s": before})
    first = decide(policy, backlogged(1, 1, before, service_rate=before), PolicyState(), 0.0)
    state = first.state
    for now in (10.0, 30.0):
        d = decide(policy, backlogged(2, 2, drain_after, service_rate=before), state, now)
        state = d.state
    capped = state.saturation.cap is not None
    assert capped == (drain_after - before < MIN_GAIN * before)
    if capped:
        assert state.saturation.cap == (1 if drain_after < before else 2)
