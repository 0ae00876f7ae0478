"""The stack benchmarks' verdicts from their measured figures (pure)."""

from __future__ import annotations

from typing import Any

from sluicebench.loadgen.mixed_bench import MixedParams, mixed_config, mixed_summary
from sluicebench.loadgen.stack_bench import scaling_config, scaling_summary


def _scale_case(n: int, jobs_per_s: float, p99_at_70: float) -> dict[str, Any]:
    return {
        "workers": n,
        "saturation": {"throughput_per_s": jobs_per_s, "run_p50_ms": 10.0},
        "load70": {"e2e_p99_ms": p99_at_70},
    }


def test_scaling_summary_against_the_one_worker_case() -> None:
    cases = [_scale_case(1, 90.0, 30.0), _scale_case(2, 180.0, 19.0), _scale_case(10, 846.0, 25.0)]
    s = scaling_summary(cases, nominal=100.0)
    rows = {r["workers"]: r for r in s["rows"]}
    assert rows[10]["vs_linear_measured"] == 0.94  # 846 / (10 x 90)
    assert rows[10]["vs_linear_nominal"] == 0.846
    assert rows[2]["load70_p99_over_service"] == 1.9
    assert s["linear_met_at_max"] is False  # 0.94 < 0.95
    assert s["p99_met"] == {1: False, 2: True, 10: False}
    ok = scaling_summary([_scale_case(1, 90.0, 1.0), _scale_case(10, 860.0, 1.0)], 100.0)
    assert ok["linear_met_at_max"] is True


def _lat(p99: float) -> dict[str, Any]:
    return {"e2e_ms": {"p99": p99}, "queue_wait_ms": {"p99": p99 / 2}}


def _mix_case(model: str, util: float, short: float, long_: float) -> dict[str, Any]:
    return {"model": model, "utilisation": util, "short": _lat(short), "long": _lat(long_)}


def test_mixed_summary_ratio_and_target() -> None:
    cases = [
        _mix_case("mix_buckets", 0.7, 50.0, 300.0),
        _mix_case("mix_one", 0.7, 100.0, 250.0),
        _mix_case("mix_buckets", 0.9, 80.0, 900.0),
        _mix_case("mix_one", 0.9, 400.0, 600.0),
    ]
    s = mixed_summary(cases)
    assert [(r["utilisation"], r["ratio"]) for r in s["rows"]] == [(0.7, 2.0), (0.9, 5.0)]
    assert s["met_at_90"] is True
    cases[3] = _mix_case("mix_one", 0.9, 399.0, 600.0)
    assert mixed_summary(cases)["met_at_90"] is False


def test_configs_differ_only_in_buckets() -> None:
    models = mixed_config(MixedParams(short_words=10, max_batch=8))["models"]
    assert models["mix_buckets"]["buckets"] == [10, 100] and models["mix_one"]["buckets"] == [100]
    assert {k: v for k, v in models["mix_buckets"].items() if k != "buckets"} == {
        k: v for k, v in models["mix_one"].items() if k != "buckets"
    }
    assert models["mix_one"]["batching"]["max_batch_tokens"] == 800  # a full batch of long jobs
    scale = scaling_config(10.0, max_batch=1)["models"]
    assert scale["scale"] == scale["capacity"] and scale["scale"]["params"]["base_ms"] == 10.0
