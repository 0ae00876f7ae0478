"""The dashboard's pure pieces: percentiles, rates, worker rows, decision and dead-letter logs."""

from __future__ import annotations

import json
from collections import deque

import pytest

from gateway.dashboard.view import (
    CounterSample,
    add_sample,
    autoscaler_view,
    dead_letter_rows,
    quantile_ms,
    rates,
    workers_view,
)
from sluice.registry import WorkerInfo
from tests.factories import worker_info

#        labels:  5  10  25  50 100 250 500 1000 2500 5000 10000 30000 60000 inf
EMPTY = [0] * 14


def counts(**by_label: int) -> list[int]:
    labels = [
        "5",
        "10",
        "25",
        "50",
        "100",
        "250",
        "500",
        "1000",
        "2500",
        "5000",
        "10000",
        "30000",
        "60000",
        "inf",
    ]
    return [by_label.get(f"b{label}", 0) for label in labels]


@pytest.mark.parametrize(
    ("hist", "q", "expected"),
    [
        (EMPTY, 0.5, None),
        # 100 in (0, 5]: the median is halfway through the bucket
        (counts(b5=100), 0.5, 2.5),
        # 90 in (5, 10], 10 in (250, 500]: p50 is 5 + 5 * 50/90, p99 is 250 + 250 * 9/10
        (counts(b10=90, b500=10), 0.5, 7.8),
        (counts(b10=90, b500=10), 0.99, 475.0),
        # everything past the last bound: "at least 60 s"
        (counts(binf=3), 0.99, 60000),
    ],
)
def test_quantile_interpolates_inside_the_bucket(
    hist: list[int], q: float, expected: float | None
) -> None:
    assert quantile_ms(hist, q) == expected


def test_rates_over_the_recent_span_and_reset_when_counters_go_back() -> None:
    samples: deque[CounterSample] = deque()
    add_sample(samples, CounterSample(100.0, {"arrived": 0, "succeeded": 0}), keep_s=20)
    assert rates(samples) is None  # one sample: nothing to difference
    for t, n in ((101.0, 10), (102.0, 30), (106.0, 70)):
        add_sample(samples, CounterSample(t, {"arrived": n, "succeeded": n // 2}), keep_s=20)
    r = rates(samples, span_s=5)
    # from the newest sample at least 5 s old (100: the span is covered): 70 / 6 s
    assert r is not None and r["arrived"] == 11.67 and r["succeeded"] == 5.83
    add_sample(samples, CounterSample(107.0, {"arrived": 1}), keep_s=20)  # Redis flushed
    assert len(samples) == 1 and rates(samples) is None


def test_old_samples_are_dropped() -> None:
    samples: deque[CounterSample] = deque()
    for t in range(100):
        add_sample(samples, CounterSample(float(t), {"arrived": t}), keep_s=10)
    assert len(samples) <= 12 and samples[-1].t_s == 99


def _worker(wid: str, state: str, started: float, rate: float = 0.0) -> WorkerInfo:
    return worker_info(
        id=wid,
        device="cuda:0",
        state=state,
        started_at=started,
        heartbeat_at=started + 5,
        service_rate=rate,
        batch_size=7,
        extra={"held": 9},
    )


def test_workers_view_counts_states_sums_ready_capacity_and_orders_rows() -> None:
    ws = [
        _worker("q", "quarantined", 1),
        _worker("r2", "ready", 3, 100.0),
        _worker("s", "starting", 4),
        _worker("r1", "ready", 2, 50.5),
        _worker("d", "draining", 0, 999.0),
    ]
    v = workers_view(ws, now_s=10)
    by_state = {"starting": 1, "standby": 0, "ready": 2, "draining": 1, "quarantined": 1}
    assert v["by_state"] == by_state
    assert v["service_rate"] == 150.5  # ready workers only: draining capacity is leaving
    assert [w["id"] for w in v["list"]] == ["s", "r1", "r2", "d", "q"]
    row = v["list"][1]
    assert (row["batch_size"], row["held"]) == (7, 9)
    assert (row["age_s"], row["heartbeat_age_s"]) == (8.0, 3.0)


def test_autoscaler_view_parses_numbers_and_skips_bad_log_lines() -> None:
    state = {
        "at_ms": "9000",
        "current": "2",
        "desired": "3",
        "reason": "slo-breach",
        "p99_wait_ms": "",
        "period_s": "5",
    }
    log = [json.dumps({"reason": "slo-breach"}), "not json", json.dumps({"reason": "load"})]
    v = autoscaler_view(state, log, now_s=12.5)
    latest = v["latest"]
    assert (latest["current"], latest["desired"], latest["reason"]) == (2, 3, "slo-breach")
    assert latest["p99_wait_ms"] is None and latest["age_s"] == 3.5
    assert [d["reason"] for d in v["decisions"]] == ["slo-breach", "load"]
    assert autoscaler_view({}, [], 0) == {"latest": None, "decisions": []}


def test_dead_letter_rows_keep_the_error_and_skip_expired_records() -> None:
    hashes = [
        {"error": json.dumps({"type": "oom", "message": "x" * 500}), "fin": "12", "att": "3"},
        {},  # expired before we read it
        {"error": "not json", "fin": ""},
    ]
    rows = dead_letter_rows(["a", "b", "c"], hashes)
    assert [r["id"] for r in rows] == ["a", "c"]
    assert rows[0]["type"] == "oom" and len(rows[0]["message"]) == 300
    assert (rows[0]["at_ms"], rows[0]["attempts"]) == (12, 3)
    assert rows[1]["message"] == "not json" and rows[1]["at_ms"] is None
