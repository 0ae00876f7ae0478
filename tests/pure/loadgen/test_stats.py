"""Percentile math and the run summary (pure)."""

from __future__ import annotations

import math

import pytest

from sluicebench.loadgen.stats import Outcome, dist, percentile, summarize


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1, 2, 3, 4], 50, 2.5),  # between the two middle ranks
        ([1, 2, 3, 4], 0, 1.0),
        ([1, 2, 3, 4], 100, 4.0),
        ([4, 1, 3, 2], 75, 3.25),  # unsorted input; rank 0.75 x 3 = 2.25
        (list(range(1, 101)), 99, 99.01),  # rank 0.99 x 99 = 98.01 -> 99 + 0.01
        (list(range(1, 101)), 95, 95.05),
        ([7], 99, 7.0),
    ],
)
def test_percentile_linear_between_ranks(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_nan() -> None:
    assert math.isnan(percentile([], 50))


def test_dist_skips_missing_values() -> None:
    d = dist([10.0, None, 20.0, 30.0])
    assert d["count"] == 3 and d["mean"] == 20.0 and d["p50"] == 20.0 and d["max"] == 30.0
    assert dist([])["p99"] is None


def _ok(sent: float, done: float, bucket: str, wait: float, words: int = 10) -> Outcome:
    return Outcome(
        sent, done, "succeeded", bucket=bucket, queue_wait_ms=wait, run_ms=5.0, words=words
    )


def test_summary_window_buckets_bands_and_errors() -> None:
    outcomes = [
        _ok(0.5, 0.6, "32", 1.0),  # sent in the warm-up: not in the latency figures
        _ok(1.0, 1.1, "32", 2.0),
        _ok(1.5, 1.7, "128", 3.0, words=60),
        _ok(2.0, 2.4, "32", 4.0),
        _ok(2.9, 3.5, "32", 5.0),  # sent inside, finished after the window
        Outcome(2.0, 2.01, "error", http_status=429),
        Outcome(2.1, 2.2, "error", http_status=429),
        Outcome(2.2, 2.3, "error", error="timeout"),
        Outcome(2.3, 2.9, "failed", bucket="32"),
    ]
    s = summarize(outcomes, window_s=(1.0, 3.0), bands=[(5, 20), (40, 100)])
    assert s["throughput_per_s"] == 1.5  # 3 successes finished inside a 2 s window
    assert s["offered_per_s"] == 4.0  # 8 sent inside the window
    assert s["errors"] == {"429": 2, "job_failed": 1, "timeout": 1}
    assert s["sent"] == 9 and s["succeeded"] == 5 and s["finished"] == 6
    assert s["jobs"] == 4
    assert list(s["buckets"]) == ["32", "128"]  # numeric order, not string order
    assert s["buckets"]["32"]["jobs"] == 3 and s["buckets"]["128"]["jobs"] == 1
    assert s["buckets"]["128"]["e2e_ms"]["p50"] == pytest.approx(200.0)
    assert s["buckets"]["32"]["queue_wait_ms"]["max"] == 5.0
    assert s["bands"]["5-20"]["jobs"] == 3 and s["bands"]["40-100"]["jobs"] == 1
