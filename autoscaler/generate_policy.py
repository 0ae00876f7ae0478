"""A generative model's need (ADR 0149): replicas from slot demand, and its TTFT SLO.

A generative worker's capacity is its slots (ADR 0144), not a cost rate: a sequence
holds a slot from its claim to its last token, and a job waits only while every slot
is busy. So the replicas wanted are the active sequences plus the waiting jobs over
``slots x target_utilization``, and a waiting job counts only when the ready replicas
would not admit the backlog before a new replica could serve: slots free at about
``tokens_per_s / expected_output_tokens`` a second per replica, so the last waiting
job starts after ``queued x expected_output_tokens / (tokens_per_s x ready)``.
Pure, like :mod:`autoscaler.policy`, which calls it for models whose Observation
carries :class:`~autoscaler.observation.GenerateSignals` (and only for those:
embedding models' decisions never read this module).
"""

from __future__ import annotations

from autoscaler.observation import Observation
from sluice.config import AutoscalingConfig


def drain_s(obs: Observation) -> float | None:
    """Seconds until the ready replicas have admitted every waiting job, from their
    measured tokens/s; None while unmeasured, or with nothing ready or waiting."""
    g = obs.generate
    queued = obs.queued or 0
    if g is None or not g.tokens_per_s or obs.ready <= 0 or queued <= 0:
        return None
    return queued * g.expected_output_tokens / (g.tokens_per_s * obs.ready)


def needed(p: AutoscalingConfig, obs: Observation, arrive_s: float) -> tuple[float, str]:
    """Replicas for the slot demand, and why ("load": the active sequences alone;
    "backlog": the waiting jobs too). ``arrive_s``: how soon a replica asked for now
    serves (a promotion or a cold start)."""
    g = obs.generate
    assert g is not None, "needed() is for generative models"
    per_replica = g.slots * p.target_utilization
    busy, queued = g.slots_busy, obs.queued or 0
    load = busy / per_replica
    if queued <= 0:
        return load, "load"
    clears = drain_s(obs)
    if clears is not None and clears <= arrive_s:
        return load, "load"  # admitted before a new replica could take any of it
    want = (busy + queued) / per_replica
    if obs.starting > 0:
        want = max(want, float(obs.current))  # capacity on its way: never fewer than now
    return want, "backlog"


def ttft_breach(p: AutoscalingConfig, obs: Observation) -> bool:
    """Time to first token over its SLO (the p99 over metrics_window_s) while jobs wait."""
    g = obs.generate
    if g is None or g.ttft_p99_ms is None:
        return False
    return g.ttft_p99_ms > p.ttft_slo_ms and (obs.queued or 0) > 0
