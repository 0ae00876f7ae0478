"""The soak's criteria and key classification on made-up samples (pure)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from sluice import keys
from sluicebench.loadgen.soak_sample import classify, metric_series
from sluicebench.loadgen.soak_verdict import (
    Limits,
    completion_checks,
    rss_growth,
    theil_sen_slope,
    verdict,
    without_largest_step,
)

LIM = Limits(
    warmup_s=10,
    duration_s=60,
    rate_per_s=50,
    result_ttl_s=10,
    idempotency_ttl_s=10,
    idempotency_fraction=0.2,
    buckets=2,
)
MB = 1024 * 1024


def sample(
    t: float,
    gw_mb: float = 60.0,
    jobs: int = 500,
    used: float = 2.0,
    series: int = 68,
    done: int = 100,
    gw_fds: int = 31,
) -> dict[str, Any]:
    fam = {
        "job": jobs,
        "idempotency": 100,
        "wait_hist": int(t // 10),
        "e2e_hist": int(t // 10),
        "wake": 2,
        "queue": 2,
    }
    return {
        "t_s": t,
        "rss_mb": {"gateway": gw_mb, "worker-1": 48.0, "worker-2": 48.0},
        "redis_used_mb": used,
        "redis_keys": jobs + 110 + 2 * int(t // 10),
        "families": fam,
        "dead_letters": 0,
        "metric_series": series,
        "window": {"done": done},
        "fds": {"gateway": gw_fds, "worker-1": 5, "worker-2": 5, "redis": 28},
    }


def run(samples: list[dict[str, Any]]) -> dict[str, Any]:
    load = {"errors": {}, "sent": 3000, "succeeded": 3000}
    final = {
        "counters": {"arrived": 3000, "succeeded": 3000},
        "queued": 0,
        "in_flight": 0,
        "waiters": 0.0,
        "job_keys": 0,
        "idempotency_keys": 0,
    }
    return verdict(samples, LIM, load, final)


def failed(v: dict[str, Any]) -> list[str]:
    return [c["name"] for c in v["checks"] if not c["ok"]]


def test_a_flat_run_passes() -> None:
    v = run([sample(t) for t in range(0, 62, 2)])
    assert failed(v) == []


def test_rss_growth_is_from_the_end_of_the_warm_up() -> None:
    # Growth during the warm-up (t < 10) does not count: 30 -> 60 MB before it.
    samples = [sample(t, gw_mb=30.0 + 3 * t if t < 10 else 60.0) for t in range(0, 62, 2)]
    g = rss_growth(samples, LIM)["gateway"]
    assert (g["start_mb"], g["end_mb"], g["growth_pct"]) == (60.0, 60.0, 0.0)


def test_a_leak_of_1kb_per_job_fails_by_the_per_job_bound_only() -> None:
    # 100 jobs per 2 s sample, 1 KB each: about 2.4 MB over the run, 4% of 60 MB.
    samples = [sample(t, gw_mb=60.0 + max(0, t - 10) * 50 * 1024 / MB) for t in range(0, 62, 2)]
    v = run(samples)
    assert failed(v) == ["gateway RSS growth per job (trend)"]
    assert v["rss"]["gateway"]["bytes_per_job"] == pytest.approx(1024, rel=0.05)
    assert v["rss"]["gateway"]["bytes_per_job_trend"] == pytest.approx(1024, rel=0.1)


def test_a_leak_that_starts_mid_run_fails() -> None:
    # Flat to t=35, then 2 KB per job: the first half's rate is 0 (a lower-of-halves
    # bound passed this), the slope over the whole run is about half of 2 KB.
    samples = [sample(t, gw_mb=60.0 + max(0, t - 35) * 50 * 2048 / MB) for t in range(0, 62, 2)]
    v = run(samples)
    assert failed(v) == ["gateway RSS growth per job (trend)"]
    assert v["rss"]["gateway"]["bytes_per_job_trend"] == pytest.approx(1024, rel=0.15)


def test_a_flat_noisy_run_passes() -> None:
    # +-0.3 MB of allocator jitter on every reading, no trend.
    rng = random.Random(7)
    samples = [sample(t, gw_mb=60.0 + rng.uniform(-0.3, 0.3)) for t in range(0, 62, 2)]
    v = run(samples)
    assert failed(v) == []
    assert abs(v["rss"]["gateway"]["bytes_per_job_trend"]) < 300


@pytest.mark.parametrize("step_at_s", [20, 30, 36, 50])
def test_one_step_anywhere_in_the_run_is_not_a_trend(step_at_s: int) -> None:
    samples = [sample(t, gw_mb=63.9 if t < step_at_s else 65.2) for t in range(0, 62, 2)]
    assert rss_growth(samples, LIM)["gateway"]["bytes_per_job_trend"] == 0


def test_theil_sen_ignores_one_odd_reading() -> None:
    xs = [float(x) for x in range(10)]
    assert theil_sen_slope(xs, [2 * x for x in xs]) == 2
    assert theil_sen_slope(xs, [2 * x + (50 if x == 4 else 0) for x in xs]) == 2
    assert theil_sen_slope([1.0, 1.0], [0.0, 5.0]) is None
    assert without_largest_step([0, 1, 2, 12, 13, 14]) == [0, 1, 2, 3, 4, 5]


def test_one_step_up_after_a_burst_is_not_a_leak() -> None:
    # A latency burst at t=30 raised the gateway's high-water mark by 1.3 MB, then
    # flat: 600 B/job over the run, but nothing in the second half.
    samples = [sample(t, gw_mb=63.9 if t < 30 else 65.2) for t in range(0, 62, 2)]
    v = run(samples)
    assert failed(v) == [] and v["rss"]["gateway"]["bytes_per_job"] > 500


def test_keys_without_a_ttl_fail_the_plateau_and_the_bound() -> None:
    samples = [sample(t, jobs=500 + 50 * t, used=2.0 + 0.03 * t) for t in range(0, 62, 2)]
    assert {"Redis keys plateau", "Redis used_memory plateau", "job keys bounded"} <= set(
        failed(run(samples))
    )


def test_latency_histograms_may_build_up_to_their_hour() -> None:
    # One key per 10 s window for an hour: not counted in the plateau, bounded by 361.
    v = run([sample(t) for t in range(0, 62, 2)])
    assert v["plateaus"]["keys"]["late"] == v["plateaus"]["keys"]["early"]
    assert v["family_bounds"]["wait_hist"] == v["family_bounds"]["e2e_hist"] == 361


def test_growing_metric_label_sets_fail() -> None:
    samples = [sample(t, series=68 + t) for t in range(0, 62, 2)]
    assert failed(run(samples)) == ["metric label sets bounded"]


def test_sockets_left_open_after_the_load_fail() -> None:
    samples = [sample(t) for t in range(0, 62, 2)]
    assert failed(run([*samples, sample(80, gw_fds=45)])) == []
    assert failed(run([*samples, sample(80, gw_fds=3000)])) == ["no file descriptors left open"]


def test_errors_and_unfinished_jobs_fail() -> None:
    load = {"errors": {"503": 2}, "sent": 10, "succeeded": 8}
    final = {
        "counters": {"arrived": 10, "succeeded": 9},
        "queued": 1,
        "in_flight": 0,
        "waiters": 3.0,
        "job_keys": 4,
        "idempotency_keys": 0,
    }
    assert [c.ok for c in completion_checks(load, final)] == [False] * 5


def test_classify_sorts_every_family_of_sluice_keys() -> None:
    m = "soak"
    names = [
        keys.job_key(m, "soak.1"),
        keys.job_key(m, "soak.2"),
        keys.idempotency_key(m, "k"),
        keys.wait_hist_key(m, 1700000000),
        keys.dead_letter_key(m),
        keys.queue_key(m, "32"),
        keys.inflight_key(m),
        keys.wake_key(m, "32"),
        keys.stats_key(m),
        keys.seq_key(m),
        keys.worker_key(m, "w1"),
        keys.workers_key(m),
        keys.workers_info_key(m),
        keys.worker_control_key(m, "w1"),
        keys.e2e_hist_key(m, 1700000000),
        keys.owner_jobs_key(m),
        keys.rate_limit_key(m),
        keys.decisions_key(m),
        keys.scale_state_key(m),
        "unrelated",
    ]
    counts = classify(names, [m])
    assert counts["job"] == 2 and counts["workers"] == 2 and counts["scale"] == 2
    assert counts["other"] == 1 and sum(counts.values()) == len(names)
    assert all(
        counts[f] == 1
        for f in (
            "idempotency",
            "wait_hist",
            "e2e_hist",
            "dead_letter",
            "queue",
            "inflight",
            "wake",
            "stats",
            "seq",
            "worker",
            "control",
            "owners",
            "rate_limit",
        )
    )


def test_metric_series_counts_sluice_series_and_reads_the_waiters() -> None:
    text = (
        "# HELP sluice_x x\n# TYPE sluice_x counter\n"
        'sluice_x_total{route="/a",status="200"} 3.0\nsluice_gateway_longpoll_waiters 2.0\n'
        "python_gc_objects_collected_total 1.0\n"
    )
    assert metric_series(text) == (2, 2.0)
