"""What a load run measured: per-job outcomes in, a summary out (pure).

Latency percentiles use linear interpolation between closest ranks (numpy's
default), so p50 of [1, 2, 3, 4] is 2.5 and p99 of a short run is not simply
its maximum.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

PERCENTILES = (50.0, 95.0, 99.0)
# "submitted": a submit-only run (gateway capacity) does not wait for results.
OK_STATUSES = frozenset({"succeeded", "submitted"})


@dataclass(frozen=True, slots=True)
class Outcome:
    """One job as the client saw it; times are the driver's monotonic clock, in seconds."""

    sent_s: float
    done_s: float
    status: str  # the job's final status, or "error" when an HTTP call failed
    http_status: int | None = None  # the failing call's status (None: timeout/transport)
    error: str | None = None  # a short reason when status == "error"
    bucket: str | None = None
    queue_wait_ms: float | None = None  # from the job's own timings (server clock)
    run_ms: float | None = None
    server_ms: float | None = None  # queued_at -> finished_at on the server clock
    submit_ms: float | None = None  # the POST's round trip
    words: int | None = None  # the input's length, to group by the workload's bands

    @property
    def e2e_ms(self) -> float:
        return (self.done_s - self.sent_s) * 1000.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of values, linear between closest ranks; NaN if empty."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * min(100.0, max(0.0, q)) / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def dist(values: Iterable[float | None]) -> dict[str, float | int | None]:
    """count, mean and p50/p95/p99/max of the non-missing values (ms, rounded to 0.01)."""
    xs = [v for v in values if v is not None]
    out: dict[str, float | int | None] = {"count": len(xs)}
    if not xs:
        return out | {"mean": None, "max": None} | {f"p{q:g}": None for q in PERCENTILES}
    out["mean"] = round(sum(xs) / len(xs), 2)
    for q in PERCENTILES:
        out[f"p{q:g}"] = round(percentile(xs, q), 2)
    out["max"] = round(max(xs), 2)
    return out


def error_causes(outcomes: Sequence[Outcome]) -> dict[str, int]:
    """Failures by cause: an HTTP status ("429"), "timeout", "transport", or "job_<status>"."""
    counts: Counter[str] = Counter()
    for o in outcomes:
        if o.status == "error":
            cause = str(o.http_status) if o.http_status is not None else o.error
            counts[cause or "transport"] += 1
        elif o.status not in OK_STATUSES:
            counts[f"job_{o.status}"] += 1
    return dict(sorted(counts.items()))


def _bucket_key(bucket: str) -> tuple[int, str]:
    return (int(bucket), bucket) if bucket.isdigit() else (1 << 62, bucket)


def _latency(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    ok = [o for o in outcomes if o.status in OK_STATUSES]
    return {
        "jobs": len(ok),
        "e2e_ms": dist(o.e2e_ms for o in ok),
        "queue_wait_ms": dist(o.queue_wait_ms for o in ok),
        "run_ms": dist(o.run_ms for o in ok),
        "server_ms": dist(o.server_ms for o in ok),
    }


def _by_band(outcomes: Sequence[Outcome], bands: Sequence[tuple[int, int]]) -> dict[str, Any]:
    out = {}
    for lo, hi in bands:
        inside = [o for o in outcomes if o.words is not None and lo <= o.words <= hi]
        out[f"{lo}-{hi}"] = _latency(inside)
    return out


def summarize(
    outcomes: Sequence[Outcome],
    *,
    window_s: tuple[float, float],
    sent_total: int | None = None,
    bands: Sequence[tuple[int, int]] = (),
) -> dict[str, Any]:
    """Throughput over the measurement window, latency overall and per bucket, errors.

    Throughput counts the jobs that *finished* successfully inside ``window_s``
    (start, end on the driver's clock) per second of it, so a warm-up or a tail
    of stragglers does not inflate it. Latency is over every job sent inside the
    window: overall, per bucket, and per input-length band (``bands``, in words).
    """
    start, end = window_s
    span = max(1e-9, end - start)
    measured = [o for o in outcomes if start <= o.sent_s <= end]
    done_in = sum(1 for o in outcomes if o.status in OK_STATUSES and start <= o.done_s <= end)
    sent_in = len(measured)
    buckets: dict[str, list[Outcome]] = {}
    for o in measured:
        if o.bucket is not None:
            buckets.setdefault(o.bucket, []).append(o)
    return {
        "window_s": round(span, 3),
        "sent": sent_total if sent_total is not None else len(outcomes),
        "finished": sum(1 for o in outcomes if o.status != "error"),
        "succeeded": sum(1 for o in outcomes if o.status in OK_STATUSES),
        "offered_per_s": round(sent_in / span, 2),
        "throughput_per_s": round(done_in / span, 2),
        "errors": error_causes(outcomes),
        "submit_ms": dist(o.submit_ms for o in measured),
        **_latency(measured),
        "buckets": {b: _latency(buckets[b]) for b in sorted(buckets, key=_bucket_key)},
        "bands": _by_band(measured, bands),
    }
