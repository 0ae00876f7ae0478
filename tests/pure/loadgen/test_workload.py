"""The workload's length mix, the Poisson arrival process and trace files (pure, seeded)."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest

from sluice.errors import ConfigError
from sluicebench.loadgen.workload import (
    MIXED,
    LengthBand,
    Workload,
    draw_length,
    load_trace,
    parse_mix,
    poisson_arrivals,
)


def test_default_mix_proportions() -> None:
    rng = random.Random(3)
    n = 20_000
    lengths = [draw_length(rng) for _ in range(n)]
    short = sum(5 <= x <= 20 for x in lengths) / n
    medium = sum(40 <= x <= 100 for x in lengths) / n
    long_ = sum(200 <= x <= 300 for x in lengths) / n
    # 3 sigma of a binomial share at n=20,000 is under 1%.
    assert abs(short - 0.70) < 0.01
    assert abs(medium - 0.25) < 0.01
    assert abs(long_ - 0.05) < 0.005
    assert short + medium + long_ == 1.0  # nothing falls between the bands
    assert min(lengths) == 5 and max(lengths) == 300  # both ends of the range are drawn


def test_inputs_have_the_drawn_word_counts() -> None:
    wl = Workload(seed=5)
    counts = [len(wl.next_input().split()) for _ in range(2_000)]
    assert all(5 <= c <= 20 or 40 <= c <= 100 or 200 <= c <= 300 for c in counts)
    assert Workload(seed=5).next_input() == Workload(seed=5).next_input()  # seeded
    assert Workload(seed=5).next_input() != Workload(seed=6).next_input()


def test_parse_mix() -> None:
    assert parse_mix("5-20:0.7,40-100:0.25,200-300:0.05") == MIXED
    assert parse_mix("10:0.9,100:0.1") == (LengthBand(10, 10, 0.9), LengthBand(100, 100, 0.1))
    for bad in ("", "x-5:1", "20-5:1", "5-20:0", "0-3:1"):
        with pytest.raises(ConfigError):
            parse_mix(bad)


def test_poisson_arrival_statistics() -> None:
    rate, duration = 200.0, 100.0
    times = poisson_arrivals(rate, random.Random(11), duration_s=duration)
    n = len(times)
    # Count ~ Poisson(20,000): sd ~141, so 3 sd is ~425.
    assert abs(n - rate * duration) < 425
    assert times == sorted(times) and 0 < times[0] and times[-1] < duration
    gaps = [b - a for a, b in zip([0.0, *times], times, strict=False)]
    mean = statistics.fmean(gaps)
    assert abs(mean - 1 / rate) < 0.03 / rate
    # Exponential gaps: coefficient of variation 1 (a fixed-interval schedule gives 0).
    assert abs(statistics.pstdev(gaps) / mean - 1.0) < 0.03
    # Counts per 1 s window: variance / mean ~ 1 (index of dispersion of a Poisson process).
    per_s = [0] * int(duration)
    for t in times:
        per_s[int(t)] += 1
    dispersion = statistics.pvariance(per_s) / statistics.fmean(per_s)
    assert 0.7 < dispersion < 1.3


def test_poisson_stops_at_job_count_and_is_seeded() -> None:
    a = poisson_arrivals(50.0, random.Random(1), max_jobs=100)
    assert len(a) == 100
    assert a == poisson_arrivals(50.0, random.Random(1), max_jobs=100)
    with pytest.raises(ConfigError):
        poisson_arrivals(0.0, random.Random(1), max_jobs=1)
    with pytest.raises(ConfigError):
        poisson_arrivals(1.0, random.Random(1))


def test_trace_csv(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("time_s,cost\n12.5,40\n10.0,7\n11.0,300.4\n")
    arrivals = load_trace(path)
    assert [(a.at_s, a.words) for a in arrivals] == [(0.0, 7), (1.0, 300), (2.5, 40)]
    (tmp_path / "bad.csv").write_text("when,size\n1,2\n")
    with pytest.raises(ConfigError, match="time_s and cost"):
        load_trace(tmp_path / "bad.csv")
