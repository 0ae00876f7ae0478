"""Stack benchmark 2: short-job latency under mixed load, size buckets vs one bucket.

90% short jobs (``short_words``) and 10% ten times longer, on synthetic workers
whose time is ``per_token_ms x cost`` (max_batch 1, so both configs have the
same capacity and only the scheduling differs). Two models in one config, the
same except for their buckets: ``mix_buckets`` (a short and a long bucket) and
``mix_one`` (a single bucket). Each utilisation replays the same seeded Poisson
arrivals and inputs against both, one after the other, on the same gateway.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sluice.loadgen.driver import LoadSpec
from sluice.loadgen.stack import Stack
from sluice.loadgen.stack_bench import phase
from sluice.loadgen.workload import LengthBand

TARGET_SHORT_P99_RATIO = 5.0
MODELS = ("mix_buckets", "mix_one")


def mixed_config(short_words: int, per_token_ms: float) -> dict[str, Any]:
    long_words = 10 * short_words

    def model(buckets: list[int]) -> dict[str, Any]:
        return {
            "handler": "synthetic",
            "params": {"base_ms": 0, "per_token_ms": per_token_ms},
            "buckets": buckets,
            "cost": {"method": "words"},
            # The scheduler's expected service time per bucket matches the handler's.
            "batching": {"max_batch": 1, "max_batch_tokens": long_words,
                         "service_ms_base": 0.01, "service_ms_per_cost": per_token_ms},
            "autoscaling": {"min_replicas": 0, "max_replicas": 64},
        }  # fmt: skip

    return {"models": {"mix_buckets": model([short_words, long_words]),
                       "mix_one": model([long_words])}}  # fmt: skip


def run_mixed(
    workdir: Path, *, workers: int = 4, short_words: int = 10, per_token_ms: float = 2.0,
    utilisations: tuple[float, ...] = (0.7, 0.9), duration_s: float = 30.0,
    warmup_s: float = 5.0, overlap: bool = False, progress: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """Benchmark 2; returns the JSON document."""
    cfg = mixed_config(short_words, per_token_ms)
    cfg_path = workdir / "mixed.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    long_words = 10 * short_words
    bands = (LengthBand(short_words, short_words, 0.9), LengthBand(long_words, long_words, 0.1))
    mean_ms = per_token_ms * (0.9 * short_words + 0.1 * long_words)
    capacity = workers * 1000.0 / mean_ms
    args = [] if overlap else ["--no-overlap"]
    cases = []
    with Stack(cfg_path, workdir / "logs-mixed", worker_args=args) as st:
        for i, util in enumerate(utilisations):
            rate = round(util * capacity, 1)
            for model in MODELS:
                st.add_workers(model, workers)
                spec = LoadSpec(url=st.url, model=model, rate=rate, duration_s=duration_s,
                                warmup_s=warmup_s, bands=bands, seed=100 + i, progress=progress,
                                label=f"{model} at {util:.0%} = {rate}/s")  # fmt: skip
                out = phase(st, spec)
                st.stop_workers(model)
                # Short and long by the input's own size (one bucket holds both).
                split = {"short": out["bands"][f"{short_words}-{short_words}"],
                         "long": out["bands"][f"{long_words}-{long_words}"]}  # fmt: skip
                cases.append({"model": model, "utilisation": util, "rate_per_s": rate,
                              "throughput_per_s": out["throughput_per_s"],
                              "errors": out["errors"], "cpu": out["cpu"]["cores"],
                              "send_lag_p99_ms": out["send_lag_ms"]["p99"], **split})  # fmt: skip
    return {"config": cfg["models"], "workers": workers, "short_ms": per_token_ms * short_words,
            "long_ms": per_token_ms * long_words, "mean_service_ms": mean_ms,
            "capacity_jobs_per_s": round(capacity, 1), "overlap": overlap,
            "duration_s": duration_s, "warmup_s": warmup_s, "cases": cases,
            "summary": mixed_summary(cases)}  # fmt: skip


def mixed_summary(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Short-job p99 (end to end) one bucket / buckets, per utilisation."""
    rows = []
    for util in sorted({c["utilisation"] for c in cases}):
        pair = {c["model"]: c for c in cases if c["utilisation"] == util}
        b, o = pair.get("mix_buckets"), pair.get("mix_one")
        if not (b and o and b["short"] and o["short"]):
            continue
        pb, po = b["short"]["e2e_ms"]["p99"], o["short"]["e2e_ms"]["p99"]
        wb, wo = b["short"]["queue_wait_ms"]["p99"], o["short"]["queue_wait_ms"]["p99"]
        rows.append({"utilisation": util, "short_p99_buckets_ms": pb, "short_p99_one_ms": po,
                     "ratio": round(po / pb, 2) if pb else None,
                     "short_wait_p99_buckets_ms": wb, "short_wait_p99_one_ms": wo,
                     "long_p99_buckets_ms": b["long"]["e2e_ms"]["p99"],
                     "long_p99_one_ms": o["long"]["e2e_ms"]["p99"]})  # fmt: skip
    at90 = next((r for r in rows if abs(r["utilisation"] - 0.9) < 1e-9), None)
    return {"rows": rows, "target_ratio_at_90": TARGET_SHORT_P99_RATIO,
            "met_at_90": at90["ratio"] >= TARGET_SHORT_P99_RATIO
            if at90 and at90["ratio"] else None}  # fmt: skip
