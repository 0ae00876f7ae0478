"""Bulk work in the scaling decision (ADR 0090), applied after the interactive need.

Interactive need is computed from non-bulk signals only (policy._want); bulk work
may then raise the count, only up to ``low_priority_max_replicas`` (the cap):

- unset (None): bulk adds no replicas, it fills the headroom interactive sizing
  leaves. But a model at zero is woken to one ("bulk-wake"), and a scale-to-zero
  model keeps one while bulk work remains, so a bulk job on such a model finishes.
- 0: bulk never adds, keeps or wakes a replica; it runs only beside interactive load.
- N: enough replicas for the interactive need plus draining the bulk backlog within
  ``backlog_drain_s``, at most N ("bulk"). Bounds, step limits and the scale-down
  window apply as to any recommendation.

Pure functions, like the rest of the policy: no Redis, no clock.
"""

from __future__ import annotations

import math

from autoscaler.observation import Observation
from sluice.config import AutoscalingConfig


def has_work(obs: Observation) -> bool:
    """Bulk items are queued, or a live coordinator reports work still to feed."""
    return obs.bulk_queued > 0 or obs.bulk_backlog_cost > 0


def keeps_active(p: AutoscalingConfig, obs: Observation) -> bool:
    """Pending bulk work counts as activity (no idle scale-to-zero) unless the cap is 0."""
    return p.low_priority_max_replicas != 0 and has_work(obs)


def wakes(p: AutoscalingConfig, obs: Observation) -> bool:
    """A model at zero with bulk work gets one replica (a switched-off model does not)."""
    return obs.current == 0 and p.max_replicas > 0 and keeps_active(p, obs)


def raise_for_bulk(
    p: AutoscalingConfig, obs: Observation, mu: float, want: int, needed: float, reason: str
) -> tuple[int, float, str]:
    """The interactive recommendation (want, needed, reason), raised for bulk work."""
    cap = p.low_priority_max_replicas
    if not keeps_active(p, obs):
        return want, needed, reason
    if cap is None:
        if want < 1 and wakes(p, obs):
            return 1, needed, "bulk-wake"
        return want, needed, reason
    total = needed + obs.bulk_backlog_cost / (mu * p.backlog_drain_s)
    bulk_want = max(1, math.ceil(total - 1e-9))  # queued items of unknown cost still need one
    cur = obs.current
    if cur > 0 and abs(total / cur - 1.0) <= p.tolerance:
        bulk_want = cur  # the same tolerance band as interactive need: no flapping
    bulk_want = min(cap, bulk_want)
    if bulk_want > want:
        return bulk_want, total, "bulk"
    return want, needed, reason
