"""Admission control as pure functions: who is shed, and when to come back.

Nothing here reads a clock or Redis; the caller passes a :class:`Load` (from the
snapshot) and ``now_s``. The queue limits themselves are enforced atomically by
the submit script, with the limits this module scales per priority.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sluice.config import ModelConfig
from sluice.errors import NotReady, Overloaded, QueueFull
from sluice.jobs import Owner
from sluice.queue.partitions import share

MIN_RETRY_S = 1
MAX_RETRY_S = 3600


@dataclass(frozen=True, slots=True)
class Load:
    """What the gateway knows about a model's backlog and capacity."""

    queued: int
    queued_cost: int
    ready_workers: int
    starting_since_s: list[float]  # started_at of each starting worker
    measured_rate: float  # cost/s from worker heartbeats or completions; 0 = unknown


@dataclass(frozen=True, slots=True)
class Rate:
    cost_per_s: float
    source: str  # "measured" (heartbeats or completions) | "config" (a guess)


@dataclass(frozen=True, slots=True)
class Limits:
    max_jobs: int
    max_cost: int


def limits_for(cfg: ModelConfig, priority: str, shed_fraction: dict[str, float]) -> Limits:
    """The queue limits a job of this priority is admitted under: low sees the least room."""
    f = shed_fraction.get(priority, 1.0)
    q = cfg.queue
    return Limits(max(1, int(q.max_queued_jobs * f)), max(1, int(q.max_queued_cost * f)))


def config_rate(cfg: ModelConfig, workers: int) -> float:
    """Cost/s that `workers` would drain at the configured service-time guess."""
    b = cfg.batching
    size = cfg.buckets[len(cfg.buckets) // 2]
    per_job_ms = b.service_ms_base + b.service_ms_per_cost * size
    return max(1, workers) * size * 1000.0 / per_job_ms


def drain_rate(cfg: ModelConfig, load: Load) -> Rate:
    """Measured drain rate when there is one, else the config's guess (never 0)."""
    if load.measured_rate > 0:
        return Rate(load.measured_rate, "measured")
    return Rate(config_rate(cfg, load.ready_workers), "config")


def clamp_retry(seconds: float) -> int:
    return int(min(MAX_RETRY_S, max(MIN_RETRY_S, math.ceil(seconds))))


def retry_after_full(
    err: QueueFull,
    limits: Limits,
    new_jobs: int,
    new_cost: int,
    rate: Rate,
    owner: Owner | None = None,
    partitions: int = 1,
) -> int:
    """Seconds until enough backlog drains for this request to fit its priority's limits
    (or, for an API key over its cap, until enough of the key's own jobs could end).

    With ``partitions`` N > 1 the refusal came from one partition: its counts are
    compared with that partition's share of the limits (ceil(limit / N), ADR 0159),
    and it drains at about 1/N of the model's rate (workers serve partitions in turn)."""
    n = max(1, partitions)
    per_s = rate.cost_per_s / n
    if err.reason == "owner_jobs" and owner is not None:
        # The model drains `rate` cost/s; assume this key's jobs cost what these do.
        excess_jobs = err.queued + new_jobs - share(owner.max_unfinished, n)
        return clamp_retry(excess_jobs * (new_cost / max(1, new_jobs)) / per_s)
    if err.reason == "queue_jobs":
        avg = err.queued_cost / err.queued if err.queued else float(new_cost) / max(1, new_jobs)
        excess = (err.queued + new_jobs - share(limits.max_jobs, n)) * avg
    else:
        excess = err.queued_cost + new_cost - share(limits.max_cost, n)
    return clamp_retry(max(0.0, excess) / per_s)


def cold_start_left(cfg: ModelConfig, load: Load, now_s: float) -> float:
    cold = cfg.autoscaling.cold_start_s
    if not load.starting_since_s:
        return cold
    return max(0.0, min(cold - (now_s - t) for t in load.starting_since_s))


def check_workers(cfg: ModelConfig, load: Load, now_s: float) -> NotReady | None:
    """No ready worker: accepted when the model scales from zero, else 503."""
    if load.ready_workers > 0 or cfg.autoscaling.min_replicas == 0:
        return None
    err = NotReady("no worker is ready for this model; retry later")
    err.retry_after_s = clamp_retry(cold_start_left(cfg, load, now_s))
    return err


def estimated_wait_s(cfg: ModelConfig, load: Load, new_cost: int, now_s: float) -> float:
    wait = (load.queued_cost + new_cost) / drain_rate(cfg, load).cost_per_s
    if load.ready_workers == 0:
        wait += cold_start_left(cfg, load, now_s)
    return wait


def check_deadline(
    cfg: ModelConfig, load: Load, deadline_ms: int | None, new_cost: int, now_s: float
) -> Overloaded | None:
    """Shed a job whose deadline would pass before the backlog ahead of it drains."""
    if not deadline_ms:
        return None
    wait = estimated_wait_s(cfg, load, new_cost, now_s)
    if wait * 1000 <= deadline_ms:
        return None
    err = Overloaded(
        f"estimated queue wait {wait:.1f}s exceeds the job's deadline of {deadline_ms} ms",
        "deadline",
    )
    err.retry_after_s = clamp_retry(wait - deadline_ms / 1000)
    return err
