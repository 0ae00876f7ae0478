"""The cost benchmark's projection and targets, from made-up measured rows."""

from __future__ import annotations

from sluicebench.cost_report import combine, project, targets


def _row(route: str, jobs_per_s: float, gw_ms: float, redis_us: float) -> dict[str, object]:
    return {
        "batch": 32,
        "route": route,
        "jobs_per_s": jobs_per_s,
        "gateway_cpu_ms_per_job": gw_ms,
        "redis_cpu_us_per_job": redis_us,
        "worker_cpu_ms_per_job": 0.1,
        "redis_commands_per_job": 8.0,
        "gateway_round_trips_per_job": 2.0,
        "worker_round_trips_per_job": 0.1,
        "mean_batch": 30.0,
    }


def test_projection_rounds_up_at_the_named_utilization() -> None:
    # 10,000 jobs/s x 0.5 ms = 5 cores busy; at 70% each, 7.14 -> 8 cores.
    # 10,000 x 60 us = 0.6 of a core; at 70%, 0.857 -> 1 shard, which fits one.
    rows = project([_row("predict", 100.0, 0.5, 60.0)])
    at10k, at100k = rows
    assert (at10k["gateway_cores"], at10k["redis_shards"], at10k["fits_one_shard"]) == (8, 1, True)
    assert (at100k["gateway_cores"], at100k["redis_shards"]) == (72, 9)
    assert at100k["fits_one_shard"] is False


def test_runs_are_averaged_and_targets_read_from_predict() -> None:
    runs = [
        {"phases": [_row("predict", 100.0, 0.4, 50.0), _row("embeddings", 96.0, 0.5, 55.0)]},
        {"phases": [_row("predict", 100.0, 0.6, 70.0), _row("embeddings", 98.0, 0.5, 55.0)]},
    ]
    rows = combine(runs)
    pred = next(r for r in rows if r["route"] == "predict")
    assert pred["gateway_cpu_ms_per_job"] == 0.5 and pred["runs"] == 2
    t = targets(rows)
    assert t["gateway_cpu_ms_per_job"]["met"] is True
    assert t["redis_cpu_us_per_job"] == {"value": 60.0, "limit": 60.0, "met": True}
    assert t["openai_over_predict_jobs_per_s"] == 0.97 and t["openai_within_3pct"] is True
