"""Stack benchmark 2: short-job latency under mixed load, size buckets vs one bucket.

90% short jobs (``short_words``) and 10% ten times longer, on synthetic workers
whose batch time is ``base_ms + per_token_ms x padded tokens`` (padded to the
batch's longest input, as a real model pads). Two models in one config, the
same except for their buckets: ``mix_buckets`` (a short and a long bucket) and
``mix_one`` (a single bucket). Each utilisation replays the same seeded Poisson
arrivals and inputs against both, one after the other, on the same gateway.
With ``max_batch`` 1 both configs have the same capacity and only the
scheduling differs; with batching, one bucket also pads short inputs to long.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from sluicebench.loadgen.driver import LoadSpec
from sluicebench.loadgen.stack import Stack
from sluicebench.loadgen.stack_bench import phase
from sluicebench.loadgen.workload import LengthBand

TARGET_SHORT_P99_RATIO = 5.0
MODELS = ("mix_buckets", "mix_one")


@dataclass(frozen=True)
class MixedParams:
    """The workload and workers; a job of n words runs base_ms + per_token_ms x n x batch."""

    workers: int = 4
    short_words: int = 10  # long jobs have ten times as many
    base_ms: float = 10.0
    per_token_ms: float = 1.0
    max_batch: int = 8
    overlap: bool = True
    utilisations: tuple[float, ...] = (0.7, 0.9)
    duration_s: float = 30.0
    warmup_s: float = 5.0
    capacity_s: float = 8.0  # each config's closed-loop capacity phase
    # "buckets": both configs get the same rate (a fraction of the bucketed capacity);
    # "own": each config runs at that fraction of its own measured capacity.
    util_of: str = "buckets"
    # With buckets, this many of the workers serve only the short bucket
    # (``sluice worker --buckets``); one bucket cannot tell jobs apart, so all serve all.
    pin_short: int = 0

    @property
    def long_words(self) -> int:
        return 10 * self.short_words

    @property
    def bands(self) -> tuple[LengthBand, ...]:
        return (
            LengthBand(self.short_words, self.short_words, 0.9),
            LengthBand(self.long_words, self.long_words, 0.1),
        )


def mixed_config(p: MixedParams) -> dict[str, Any]:
    def model(buckets: list[int]) -> dict[str, Any]:
        return {
            "handler": "synthetic",
            "params": {"base_ms": p.base_ms, "per_token_ms": p.per_token_ms},
            "buckets": buckets,
            "cost": {"method": "words"},
            # The scheduler's expected service time per bucket matches the handler's.
            "batching": {
                "max_batch": p.max_batch,
                "max_batch_tokens": p.max_batch * p.long_words,
                "service_ms_base": p.base_ms,
                "service_ms_per_cost": p.per_token_ms,
            },
            "autoscaling": {"min_replicas": 0, "max_replicas": 64},
        }

    return {
        "models": {
            "mix_buckets": model([p.short_words, p.long_words]),
            "mix_one": model([p.long_words]),
        }
    }


def _case(out: dict[str, Any], p: MixedParams, model: str, util: float) -> dict[str, Any]:
    # Short and long by the input's own size (one bucket holds both).
    s, lw = p.short_words, p.long_words
    return {
        "model": model,
        "utilisation": util,
        "rate_per_s": out["spec"]["rate"],
        "throughput_per_s": out["throughput_per_s"],
        "errors": out["errors"],
        "cpu": out["cpu"]["cores"],
        "send_lag_p99_ms": out["send_lag_ms"]["p99"],
        "short": out["bands"][f"{s}-{s}"],
        "long": out["bands"][f"{lw}-{lw}"],
    }


def _start(st: Stack, model: str, p: MixedParams) -> None:
    pinned = p.pin_short if model == "mix_buckets" else 0
    if pinned:
        st.add_workers(model, pinned, extra_args=("--buckets", str(p.short_words)))
    st.add_workers(model, p.workers - pinned)


def run_mixed(workdir: Path, p: MixedParams, progress: bool = True) -> dict[str, Any]:
    """Benchmark 2; returns the JSON document.

    Utilisation is relative to capacities measured first in the same run (closed
    loop): the bucketed config's for both (the same arrivals), or each its own.
    """
    cfg = mixed_config(p)
    cfg_path = workdir / "mixed.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    args = [] if p.overlap else ["--no-overlap"]
    conc = 3 * p.workers * p.max_batch  # a full batch running, one prefetched, one queued
    base = LoadSpec(
        url="",
        model="",
        concurrency=conc,
        duration_s=p.capacity_s,
        warmup_s=2.0,
        bands=p.bands,
        progress=progress,
    )
    capacity, cases = {}, []
    with Stack(cfg_path, workdir / "logs-mixed", worker_args=args) as st:
        base = replace(base, url=st.url)
        for model in MODELS:
            _start(st, model, p)
            out = phase(st, replace(base, model=model, label=f"{model} capacity"))
            capacity[model] = out["throughput_per_s"]
            st.stop_workers(model)
        for i, util in enumerate(p.utilisations):
            for model in MODELS:
                ref = capacity[model if p.util_of == "own" else "mix_buckets"]
                rate = max(1.0, round(util * ref, 1))
                _start(st, model, p)
                spec = replace(
                    base,
                    model=model,
                    concurrency=None,
                    rate=rate,
                    seed=100 + i,
                    duration_s=p.duration_s,
                    warmup_s=p.warmup_s,
                    label=f"{model} at {util:.0%} = {rate}/s",
                )
                cases.append(_case(phase(st, spec), p, model, util))
                st.stop_workers(model)
    return {
        "params": asdict(p),
        "config": cfg["models"],
        "capacity_jobs_per_s": capacity,
        "cases": cases,
        "summary": mixed_summary(cases),
    }


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
        rows.append(
            {
                "utilisation": util,
                "short_p99_buckets_ms": pb,
                "short_p99_one_ms": po,
                "ratio": round(po / pb, 2) if pb else None,
                "short_wait_p99_buckets_ms": wb,
                "short_wait_p99_one_ms": wo,
                "long_p99_buckets_ms": b["long"]["e2e_ms"]["p99"],
                "long_p99_one_ms": o["long"]["e2e_ms"]["p99"],
            }
        )
    at90 = next((r for r in rows if abs(r["utilisation"] - 0.9) < 1e-9), None)
    return {
        "rows": rows,
        "target_ratio_at_90": TARGET_SHORT_P99_RATIO,
        "met_at_90": at90["ratio"] >= TARGET_SHORT_P99_RATIO if at90 and at90["ratio"] else None,
    }
