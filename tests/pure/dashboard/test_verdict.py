"""The dashboard's "is it keeping up" verdict, as a table: first rule that holds wins."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.dashboard.verdict import Signals, verdict

# Healthy traffic: 10 queued, 3 running, 2 ready workers, p99 wait 80 ms against a
# 500 ms SLO, 40 jobs/s in and out, the queue 2 shorter than 10 s ago.
BASE = Signals(
    queued=10,
    in_flight=3,
    ready=2,
    starting=0,
    p99_wait_ms=80.0,
    slo_ms=500.0,
    arrived_per_s=40.0,
    succeeded_per_s=40.0,
    queue_growth=-2,
)


@pytest.mark.parametrize(
    ("changes", "level", "text", "why_has"),
    [
        ({}, "ok", "Keeping up", "p99 queue wait 80 ms, SLO 500 ms"),
        # jobs, nobody ready: starting workers soften it to a warning
        ({"ready": 0}, "bad", "No workers", "10 queued"),
        ({"ready": 0, "starting": 2}, "warn", "Starting workers", "2 starting"),
        # over the SLO outranks everything but missing workers
        ({"p99_wait_ms": 1200.0}, "bad", "SLO breach", "1.2 s over the 500 ms SLO"),
        ({"p99_wait_ms": 1200.0, "ready": 0}, "bad", "No workers", "no worker"),
        # 50 in vs 40 out = 1.25 > 1.1, and the queue grew: behind
        (
            {"arrived_per_s": 50.0, "queue_growth": 30},
            "warn",
            "Falling behind",
            "queue +30 in 10 s",
        ),
        # same rates but the queue shrank: a burst being absorbed, not behind
        ({"arrived_per_s": 50.0, "queue_growth": -5}, "ok", "Keeping up", ""),
        # 43 in vs 40 out is within 10%
        ({"arrived_per_s": 43.0, "queue_growth": 5}, "ok", "Keeping up", ""),
        # no growth measured yet (page just opened): never "behind"
        ({"arrived_per_s": 50.0, "queue_growth": None}, "ok", "Keeping up", ""),
        (
            {"queued": 0, "in_flight": 0, "arrived_per_s": 0.0, "p99_wait_ms": None},
            "idle",
            "Idle",
            "",
        ),
        (
            {"queued": 0, "in_flight": 0, "arrived_per_s": None, "p99_wait_ms": None},
            "idle",
            "Idle",
            "",
        ),
        ({"p99_wait_ms": None}, "ok", "Keeping up", "no job waited"),
    ],
)
def test_verdict_table(changes: dict[str, object], level: str, text: str, why_has: str) -> None:
    v = verdict(replace(BASE, **changes))  # type: ignore[arg-type]
    assert (v.level, v.text) == (level, text)
    assert why_has in v.why
