"""The autoscaler policy tests' builders (tests/pure/autoscaler: test_policy.py,
test_bulk_policy.py): one policy, mu = 1000 cost/s per replica at target
utilisation 0.5, observations and states at ``NOW``, and hypothesis strategies
for any policy, observation and state."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from autoscaler.observation import Observation
from autoscaler.policy import PolicyState
from sluice.config import AutoscalingConfig

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


# -- strategies for the properties ---------------------------------------------
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
