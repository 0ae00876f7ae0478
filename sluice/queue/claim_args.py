"""What a claim sends claim.lua besides its keys: the fixed arguments and the
served queues' groups (signature CLAIM), and the small conversions the other
queue calls share with it (the retry backoff, seconds as ms, the reclaim limit)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sluice import keys
from sluice.config import ModelConfig
from sluice.jobs import Batch

RECLAIM_LIMIT = 256


def ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def backoff_args(cfg: ModelConfig) -> dict[str, int]:  # the retry backoff (docs/adr/0153)
    return {"backoff_ms": cfg.retry.backoff_ms, "backoff_max_ms": cfg.retry.backoff_max_ms}


def bulk_limits(cfg: ModelConfig, max_batch: int | None, max_tokens: int | None) -> list[int]:
    """An all-bulk batch's limits: the bulk block's, never above this claim's own
    (a worker that lowered its token budget after an out-of-memory keeps it)."""
    batch = max_batch or cfg.batching.max_batch
    tokens = max_tokens or cfg.batching.max_batch_tokens
    bulk = cfg.bulk
    return [min(batch, bulk.max_batch or batch), min(tokens, bulk.max_batch_tokens or tokens)]


def claim_fixed(
    cfg: ModelConfig,
    model: str,
    worker_id: str,
    p: int,
    max_batch: int | None,
    max_batch_tokens: int | None,
    bulk: bool,
) -> dict[str, Any]:
    """claim.lua's fixed arguments (CLAIM) for one worker's claim on partition ``p``."""
    b = cfg.batching
    bulk_batch, bulk_cost = bulk_limits(cfg, max_batch, max_batch_tokens) if bulk else (0, 0)
    weights = cfg.queue.priority_weights
    return {
        "jprefix": keys.job_prefix(model, p),
        "qprefix": keys.queue_prefix(model, p),
        "hprefix": keys.wait_hist_prefix(model, p),
        "channel": keys.done_channel(model),
        "worker": worker_id,
        "max_batch": max_batch or b.max_batch,
        "max_cost": max_batch_tokens or b.max_batch_tokens,
        "lease_ms": ms(b.lease_s),
        "max_attempts": b.max_attempts,
        "reclaim_limit": RECLAIM_LIMIT,
        "result_ttl": cfg.queue.result_ttl_s,
        "dead_ttl": cfg.queue.dead_letter_ttl_s,
        "weight_high": weights["high"],
        "weight_normal": weights["normal"],
        "weight_low": weights["low"],
        "overdue_factor": b.overdue_factor,
        "wake_prefix": keys.wake_prefix(model, p),
        "bulk_max_batch": bulk_batch,
        "bulk_max_cost": bulk_cost,
        "bulk_reserve": cfg.bulk.reserve_workers,
        "bulk_idle_reserve": cfg.bulk.idle_reserve,
        # bulk=False is a claim beside a batch still running (a worker's
        # prefetch): that worker holds a batch whatever this claim finds.
        "holding": 0 if bulk else 1,
        "prio_wait": ms(cfg.queue.max_priority_wait_s),
        "nprefix": keys.notify_prefix(model, p),
        **backoff_args(cfg),
    }


def served_groups(
    cfg: ModelConfig, served: list[str], service_ms: dict[str, float] | None
) -> list[dict[str, Any]]:
    """A claim's group per served queue: its bucket and expected service time (the
    worker's measured one, else the config's estimate)."""
    b = cfg.batching
    groups = []
    for name in served:
        est = (service_ms or {}).get(name)
        if est is None:
            est = b.service_ms_base + b.service_ms_per_cost * int(name)
        groups.append({"bucket": name, "service_ms": max(est, 0.001)})
    return groups


def merged_claims(tried: Sequence[Batch]) -> Batch:
    """The batch of the last claim tried, with every tried partition's expired and
    reclaimed counts."""
    last = tried[-1]
    return replace(
        last,
        expired=sum(b.expired for b in tried),
        reclaimed=sum(b.reclaimed for b in tried),
    )
