"""Queue-wait histograms: the claim script's buckets, read back as a p99.

The claim script (sluice/queue/lua/claim.lua) adds each claimed job's wait to a
hash per window (layout in sluice/records.py); the autoscaler's observer sums the
recent windows, the dashboard draws them, and the simulator keeps the same
histograms, so all of them see the same kind of number.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

from sluice.records import WAIT_BOUNDS_MS, WAIT_LABELS, WAIT_WINDOW_S

WINDOW_S = WAIT_WINDOW_S  # the claim script's window length
BOUNDS_MS: tuple[float, ...] = WAIT_BOUNDS_MS
LABELS: tuple[str, ...] = WAIT_LABELS
INF_WAIT_MS = 120_000.0  # what the open-ended bucket reports (finite, JSON-safe)
RECENT_S = 30.0  # p99 over the windows of the last 30 s: recent enough to end with a breach


def window_start(now_s: float) -> int:
    return int(now_s // WINDOW_S) * WINDOW_S


def recent_windows(now_s: float, span_s: float = RECENT_S) -> list[int]:
    """Window starts covering [now - span, now], the current (partial) one included."""
    last = window_start(now_s)
    first = window_start(max(0.0, now_s - span_s))
    return list(range(first, last + 1, WINDOW_S))


def slot(wait_ms: float) -> int:
    """Index into LABELS of the bucket that counts this wait (upper bounds inclusive)."""
    return bisect.bisect_left(BOUNDS_MS, wait_ms)


def merge(hists: Iterable[Mapping[str, int | str]]) -> list[int]:
    """Sum histogram hashes (label -> count) into counts per LABELS slot."""
    counts = [0] * len(LABELS)
    for h in hists:
        for i, label in enumerate(LABELS):
            counts[i] += int(h.get(label, 0) or 0)
    return counts


def quantile_ms(counts: list[int], q: float = 0.99) -> float | None:
    """The upper bound of the bucket holding the q-quantile (conservative); None if empty."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, c in enumerate(counts):
        seen += c
        if seen >= rank:
            return BOUNDS_MS[i] if i < len(BOUNDS_MS) else INF_WAIT_MS
    return INF_WAIT_MS


def window_keys(prefix: str, now_s: float, span_s: float = RECENT_S) -> list[str]:
    """The hash keys of the windows covering [now - span, now] of any histogram kept in
    this layout under ``prefix`` (``<prefix><window start s>``): the queue wait's, the
    end-to-end latency's, the time to first token's (``keys.ttft_hist_prefix``)."""
    return [f"{prefix}{w}" for w in recent_windows(now_s, span_s)]
