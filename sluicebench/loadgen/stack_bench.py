"""Stack benchmark 1: horizontal scaling through the real gateway (issue 6).

Synthetic workers (max_batch 1, ``base_ms`` sleep per job, so one worker is
worth about 1000/base_ms jobs/s) behind one gateway on a private Redis: the
saturated throughput with 1, 2, 5, 10 workers (closed loop), then latency at
70% of each measured capacity (open loop, Poisson). In the same run the
gateway's own submit capacity is measured (POST only), and every phase records
the CPU each process used, so a ceiling that is the gateway, the load generator
or the machine shows up as such.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import yaml

from sluicebench.loadgen.driver import LoadSpec, run_load
from sluicebench.loadgen.stack import Stack
from sluicebench.loadgen.workload import LengthBand

TARGET_LINEAR = 0.95
TARGET_P99_X_SERVICE = 2.0
SHORT = (LengthBand(5, 20, 1.0),)


def _busy_s() -> float:
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def phase(stack: Stack, spec: LoadSpec) -> dict[str, Any]:
    """Run one load spec and attach the CPU each part of the stack used meanwhile."""
    before, busy0, t0 = stack.cpu_s(), _busy_s(), time.monotonic()
    out = run_load(spec)
    wall = time.monotonic() - t0
    after, busy = stack.cpu_s(), _busy_s() - busy0
    cpu = {role: round(after[role] - before.get(role, 0.0), 2) for role in after}
    cpu["loadgen"] = out["client_cpu_s"]
    ours = sum(cpu.values())
    out["cpu"] = {
        "wall_s": round(wall, 2),
        "seconds": cpu,
        "cores": {role: round(s / wall, 2) for role, s in cpu.items()},
        "machine_busy_cores": round(busy / wall, 2),
        "others_cores": round(max(0.0, busy - ours) / wall, 2),
        "machine_cores": psutil.cpu_count(),
    }
    return out


def scaling_config(base_ms: float, max_batch: int = 1) -> dict[str, Any]:
    model = {
        "handler": "synthetic",
        "params": {"base_ms": base_ms, "per_token_ms": 0},
        "buckets": [64],
        "cost": {"method": "words"},
        "batching": {
            "max_batch": max_batch,
            "max_batch_tokens": 64 * max_batch,
            "service_ms_base": base_ms,
        },
        "autoscaling": {"min_replicas": 0, "max_replicas": 64},
    }
    # "capacity" has no workers: the submit-only phase fills its queue, nobody else's.
    return {"models": {"scale": model, "capacity": model}}


def _brief(out: dict[str, Any]) -> dict[str, Any]:
    e2e, wait = out["e2e_ms"], out["queue_wait_ms"]
    return {
        "throughput_per_s": out["throughput_per_s"],
        "offered_per_s": out["offered_per_s"],
        "e2e_p50_ms": e2e["p50"],
        "e2e_p99_ms": e2e["p99"],
        "wait_p99_ms": wait["p99"],
        "run_p50_ms": out["run_ms"]["p50"],
        "submit_p99_ms": out["submit_ms"]["p99"],
        "errors": out["errors"],
        "send_lag_p99_ms": out["send_lag_ms"]["p99"],
        "cpu_cores": out["cpu"]["cores"],
        "machine_busy_cores": out["cpu"]["machine_busy_cores"],
        "others_cores": out["cpu"]["others_cores"],
    }


def run_scaling(
    workdir: Path,
    *,
    workers: list[int],
    base_ms: float = 10.0,
    max_batch: int = 1,
    duration_s: float = 6.0,
    warmup_s: float = 1.5,
    gateway_workers: int = 1,
    progress: bool = True,
) -> dict[str, Any]:
    """Benchmark 1; returns the JSON document (cases + summary)."""
    cfg = scaling_config(base_ms, max_batch)
    cfg_path = workdir / "scaling.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    cases: list[dict[str, Any]] = []
    with Stack(cfg_path, workdir / "logs-scaling", gateway_workers=gateway_workers) as st:
        closed = LoadSpec(
            url=st.url,
            model="scale",
            concurrency=64,
            duration_s=duration_s,
            warmup_s=warmup_s,
            bands=SHORT,
            progress=progress,
        )
        cap = phase(st, replace(closed, model="capacity", submit_only=True, label="submit only"))
        for n in sorted(workers):
            st.add_workers("scale", n - len(st.workers("scale")))
            # Enough outstanding jobs that no worker idles (a full batch waiting for each).
            conc = max(16, 6 * n, 2 * n * max_batch)
            sat = phase(st, replace(closed, concurrency=conc, label=f"{n} workers, saturation"))
            rate = max(1.0, round(0.7 * sat["throughput_per_s"], 1))  # 1/s if nothing got through
            label = f"{n} workers, 70% = {rate}/s"
            at70 = phase(st, replace(closed, concurrency=None, rate=rate, seed=n, label=label))
            cases.append(
                {
                    "workers": n,
                    "concurrency": conc,
                    "saturation": _brief(sat),
                    "load70": _brief(at70) | {"rate_per_s": rate},
                }
            )
    return {
        "config": cfg["models"]["scale"],
        "base_ms": base_ms,
        "max_batch": max_batch,
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        "gateway_workers": gateway_workers,
        "submit_capacity": _brief(cap),
        "cases": cases,
        "summary": scaling_summary(cases, 1000.0 * max_batch / base_ms),
    }


def scaling_summary(cases: list[dict[str, Any]], nominal: float) -> dict[str, Any]:
    """Efficiency vs linear, from the 1-worker case and from the nominal jobs/s per worker."""
    one = next((c for c in cases if c["workers"] == 1), None)
    per_worker = one["saturation"]["throughput_per_s"] if one else None
    rows = []
    for c in cases:
        n, x = c["workers"], c["saturation"]["throughput_per_s"]
        service = c["saturation"]["run_p50_ms"]
        p99 = c["load70"]["e2e_p99_ms"]
        rows.append(
            {
                "workers": n,
                "jobs_per_s": x,
                "vs_linear_measured": round(x / (n * per_worker), 3) if per_worker else None,
                "vs_linear_nominal": round(x / (n * nominal), 3),
                "load70_e2e_p99_ms": p99,
                "service_ms": service,
                "load70_p99_over_service": round(p99 / service, 2) if p99 and service else None,
            }
        )
    last = rows[-1] if rows else None
    return {
        "per_worker_jobs_per_s": per_worker,
        "nominal_per_worker_jobs_per_s": nominal,
        "rows": rows,
        "linear_target": TARGET_LINEAR,
        "linear_met_at_max": last["vs_linear_measured"] >= TARGET_LINEAR
        if last and last["vs_linear_measured"] is not None
        else None,
        "p99_target_x_service": TARGET_P99_X_SERVICE,
        "p99_met": {
            r["workers"]: r["load70_p99_over_service"] is not None
            and r["load70_p99_over_service"] < TARGET_P99_X_SERVICE
            for r in rows
        },
    }
