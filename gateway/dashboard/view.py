"""Pure pieces of the dashboard's JSON: percentiles, rates, worker rows, logs.

No Redis and no clock here: the feed (:mod:`gateway.dashboard.feed`) reads and
passes ``now`` in, so every number the page shows is tested as a table.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.config import ModelConfig
from sluice.records import DECISION_NUMBERS, JOB_COUNTS, Stat
from sluice.registry import WORKER_STATES, WorkerInfo, workers_by_state
from sluice.waits import BOUNDS_MS, merge

RATE_SPAN_S = 5.0  # throughput over the last few seconds: smooth, still live
GROWTH_SPAN_S = 10.0  # "is the queue growing" looks this far back
COUNTERS: tuple[str, ...] = (*JOB_COUNTS, Stat.ARRIVED_COST, Stat.COMPLETED_COST)


def quantile_ms(counts: list[int], q: float) -> float | None:
    """The q-quantile of a histogram (counts per LABELS slot), interpolated linearly
    inside its bucket as Prometheus' histogram_quantile does; None when empty.

    The autoscaler takes the bucket's upper bound (conservative, for decisions);
    a chart of upper bounds would only ever show 13 values and jump between them.
    The open-ended bucket reports its lower bound (60 s): "at least".
    """
    total = sum(counts)
    if total == 0:
        return None
    rank, seen = q * total, 0
    for i, c in enumerate(counts):
        if c and seen + c >= rank:
            if i >= len(BOUNDS_MS):
                return BOUNDS_MS[-1]
            lo = BOUNDS_MS[i - 1] if i > 0 else 0.0
            return round(lo + (BOUNDS_MS[i] - lo) * (rank - seen) / c, 1)
        seen += c
    return BOUNDS_MS[-1]


def latency(hists: list[Mapping[str, Any]]) -> dict[str, Any]:
    """p50/p99 and the sample count of histogram hashes summed."""
    counts = merge(hists)
    return {
        "p50_ms": quantile_ms(counts, 0.5),
        "p99_ms": quantile_ms(counts, 0.99),
        "count": sum(counts),
    }


@dataclass(frozen=True, slots=True)
class CounterSample:
    t_s: float
    values: dict[str, int]
    queued: int = 0  # a level, not a counter: kept for the queue's growth


def rates(samples: deque[CounterSample], span_s: float = RATE_SPAN_S) -> dict[str, float] | None:
    """Per-second rates of the counters since the newest sample at least ``span_s`` old
    (so a rate covers the span), else since the oldest; None until two samples exist."""
    if len(samples) < 2:
        return None
    last = samples[-1]
    base = samples[0]
    for s in samples:
        if last.t_s - s.t_s <= span_s:
            break
        base = s
    dt = last.t_s - base.t_s
    if dt <= 0:
        return None
    return {
        k: round(max(0, last.values.get(k, 0) - base.values.get(k, 0)) / dt, 2) for k in COUNTERS
    }


def growth(samples: deque[CounterSample], span_s: float = GROWTH_SPAN_S) -> int | None:
    """Queued jobs now minus at the newest sample at least ``span_s`` old (None if
    there is none that old yet)."""
    old = [s for s in samples if samples[-1].t_s - s.t_s >= span_s] if samples else []
    return samples[-1].queued - old[-1].queued if old else None


def add_sample(samples: deque[CounterSample], sample: CounterSample, keep_s: float) -> None:
    if samples and any(sample.values.get(k, 0) < samples[-1].values.get(k, 0) for k in COUNTERS):
        samples.clear()  # counters went back (Redis flushed): rates start over
    samples.append(sample)
    while len(samples) > 2 and sample.t_s - samples[1].t_s > keep_s:
        samples.popleft()


def worker_row(w: WorkerInfo, now_s: float) -> dict[str, Any]:
    return {
        "id": w.id,
        "state": w.state,
        "device": w.device,
        "host": w.host,
        "pid": w.pid,
        "busy": w.busy,
        "held": int(w.extra.get("held", 0) or 0),
        "batch_size": w.batch_size,
        "service_rate": round(w.service_rate, 1),
        "jobs": w.jobs,
        "batches": w.batches,
        "failures": w.failures,
        "buckets": w.buckets,
        "age_s": round(max(0.0, now_s - w.started_at), 1),
        "heartbeat_age_s": round(max(0.0, now_s - w.heartbeat_at), 1) if w.heartbeat_at else None,
        "parked": w.parked,  # a warm-pool worker (standby, or loading toward it)
        "start_s": round(sum((w.extra.get("start_path") or {}).values()), 2),
    }


def workers_view(workers: list[WorkerInfo], now_s: float) -> dict[str, Any]:
    counts = workers_by_state(workers)
    order = {s: i for i, s in enumerate(WORKER_STATES)}
    rows = sorted(workers, key=lambda w: (order.get(w.state, len(order)), w.started_at, w.id))
    ready = [w for w in workers if w.state == "ready"]
    return {
        "by_state": counts,
        "total": len(workers),
        "service_rate": round(sum(w.service_rate for w in ready), 1),
        "list": [worker_row(w, now_s) for w in rows],
    }


def autoscaler_view(state: Mapping[str, str], log: list[str], now_s: float) -> dict[str, Any]:
    """The latest decision (None when no autoscaler wrote one lately) and the log."""
    decisions = []
    for raw in log:
        try:
            decisions.append(json.loads(raw))
        except ValueError:
            continue  # one unreadable entry must not blank the panel
    if not state:
        return {"latest": None, "decisions": decisions}
    latest: dict[str, Any] = {
        k: _number(v) if k in DECISION_NUMBERS else v for k, v in state.items()
    }
    at_ms = latest.get("at_ms")
    latest["age_s"] = round(max(0.0, now_s - at_ms / 1000), 1) if isinstance(at_ms, float) else None
    return {"latest": latest, "decisions": decisions}


def _number(v: str) -> float | None:
    if v == "":
        return None
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def dead_letter_rows(ids: list[str], hashes: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    """The newest dead letters with their errors (a hash already expired is skipped)."""
    rows = []
    for job_id, h in zip(ids, hashes, strict=True):
        if not h:
            continue
        try:
            err = json.loads(h.get("error") or "{}")
        except ValueError:
            err = {"message": h.get("error")}
        if not isinstance(err, dict):
            err = {"message": str(err)}
        rows.append(
            {
                "id": job_id,
                "type": str(err.get("type") or "error"),
                "message": str(err.get("message") or "")[:300],
                "at_ms": int(h["fin"]) if h.get("fin", "").isdigit() else None,
                "attempts": int(h["att"]) if h.get("att", "").isdigit() else None,
                "bucket": h.get("bucket"),
            }
        )
    return rows


def history_points(
    windows: list[int],
    wait: list[Mapping[str, Any]],
    e2e: list[Mapping[str, Any]],
    window_s: float,
) -> list[dict[str, Any]]:
    """One point per finished histogram window (its middle): latency percentiles and
    completions per second. Windows with no sample at all are left out."""
    points = []
    for start, w, e in zip(windows, wait, e2e, strict=True):
        lw, le = latency([w]), latency([e])
        if not lw["count"] and not le["count"]:
            continue
        points.append(
            {
                "t_s": start + window_s / 2,
                "wait_p50_ms": lw["p50_ms"],
                "wait_p99_ms": lw["p99_ms"],
                "e2e_p50_ms": le["p50_ms"],
                "e2e_p99_ms": le["p99_ms"],
                "succeeded_per_s": round(le["count"] / window_s, 2),
            }
        )
    return points


def generate_view(
    cfg: ModelConfig, workers: list[WorkerInfo], ttft: list[Mapping[str, Any]]
) -> dict[str, Any]:
    """A generative model's panel (ADR 0149): slot occupancy of the serving workers,
    time to first token against the SLO, and output tokens/s."""
    serving = [w for w in workers if w.serving]
    slots = sum(w.slots for w in serving)
    busy = sum(w.slots_busy for w in serving)
    tps = [w.tokens_per_s for w in serving]
    measured = [t for t in tps if t > 0]
    lat = latency(ttft)
    slo = cfg.autoscaling.ttft_slo_ms
    return {
        "slots": slots,
        "slots_busy": busy,
        "occupancy": round(min(1.0, busy / slots), 3) if slots else None,
        "slots_per_worker": cfg.generate.slots if cfg.generate is not None else None,
        "ttft_p50_ms": lat["p50_ms"],
        "ttft_p99_ms": lat["p99_ms"],
        "ttft_count": lat["count"],
        "ttft_slo_ms": slo,
        "over_slo": lat["p99_ms"] is not None and lat["p99_ms"] > slo,
        "tokens_per_s": round(sum(tps), 1),
        "tokens_per_s_per_worker": round(sum(measured) / len(measured), 1) if measured else None,
    }
