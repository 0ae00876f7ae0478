"""Cost rates from cumulative counters sampled once per period.

Pure, with the sample times passed in: the observer (:mod:`autoscaler.observe`)
samples the queue's counters from Redis, the simulator (:mod:`autoscaler.sim.simulator`)
samples its own, and both turn them into rates here, so a replay sees the same
rates (windows, coverage, the sample the window starts at) as production.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from autoscaler.policy import MIN_RATE_COVERAGE


@dataclass(frozen=True, slots=True)
class Sample:
    t_s: float
    arrived_cost: float
    completed_cost: float


def window_rates(samples: deque[Sample], now: Sample, span_s: float) -> tuple[float, float] | None:
    """(arrival, completion) cost rates over the last span_s, from the oldest sample
    inside it; None until the samples cover MIN_RATE_COVERAGE of the span."""
    base = next((s for s in samples if s.t_s >= now.t_s - span_s - 1e-6), None)
    if base is None or now.t_s - base.t_s < max(1.0, MIN_RATE_COVERAGE * span_s):
        return None
    dt = now.t_s - base.t_s
    arrived = (now.arrived_cost - base.arrived_cost) / dt
    return arrived, (now.completed_cost - base.completed_cost) / dt
