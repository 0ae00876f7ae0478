"""The pure parts of reconnecting: backoff bounds and one log line per outage."""

from __future__ import annotations

import pytest

from sluice.backoff import Backoff, Outage


@pytest.mark.parametrize("rand", [0.0, 0.5, 0.999])
def test_backoff_doubles_within_jitter_and_stops_at_the_cap(rand: float) -> None:
    b = Backoff(base_s=0.1, cap_s=2.0)
    delays = [b.next_s(lambda: rand) for _ in range(40)]
    # ceilings 0.1, 0.2, 0.4, 0.8, 1.6, then 2.0 forever; each delay in [c/2, c]
    ceilings = [min(2.0, 0.1 * 2**n) for n in range(40)]
    for d, c in zip(delays, ceilings, strict=True):
        assert c / 2 <= d <= c
    assert max(delays) <= 2.0 and min(delays) >= 0.05  # never a busy loop
    b.reset()
    assert b.next_s(lambda: 0.0) == pytest.approx(0.05)


def test_jitter_spreads_processes_that_failed_together() -> None:
    a, b = Backoff(), Backoff()
    for _ in range(6):
        a.next_s(lambda: 0.0), b.next_s(lambda: 0.0)
    assert a.next_s(lambda: 0.1) != b.next_s(lambda: 0.9)


def test_one_line_per_outage_plus_rare_reminders() -> None:
    o = Outage("worker", remind_every_s=60)
    lines = [o.failed(t * 0.1, "refused") for t in range(1000)]  # 100 s of failures
    said = [m for m in lines if m]
    assert len(said) == 2  # the start, one reminder at 60 s
    assert "unavailable" in said[0] and "still unavailable after 60 s" in said[1]
    back = o.recovered(100.0)
    assert back is not None and "after 100.0 s" in back and "1000 failed" in back
    assert o.recovered(101.0) is None  # said once
    assert o.failed(102.0, "again") is not None  # a new outage is reported again
