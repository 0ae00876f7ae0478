"""``sluice bench warm-pool``: warm pools and the predictive term in the simulator.

Four tables from one run (docs/benchmarks/autoscaler.md, "Warm pools"):

0. **auto**: one config, ``warm_pool.size: auto``, on every target trace, the
   from-idle one included (:mod:`sluicebench.warm_pool_auto`);
1. **targets**: the 2x step, the 3x spike, a working day with 2x bursts and the
   noisy trace, each with the oracle, Sluice's policy without a pool, and with a
   pool sized by :func:`pool_size` (parked workers counted at their cost share);
2. **headroom**: SLO attainment and replica-seconds against ``target_utilization``
   0.5-0.9, with and without a pool, on the working day: how much headroom a pool
   saves at the same SLO;
3. **predict**: the predictive term on and off, on ramps and on noise.

Pure Python against the queueing model (autoscaler/sim/simulator.py): about a
minute and a half on a 2-core machine.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

from autoscaler.policy import default_service_rate
from autoscaler.sim import replay, traces
from autoscaler.sim.simulator import SimResult
from sluice.config import ModelConfig
from sluicebench import warm_pool_auto

# The pool's settings in every "with a pool" row: decisions every 2 s (a read is three
# round trips per model), promotions that take 2 s, parked workers at 0.1 of a replica.
POOL_PERIOD_S = 2.0
# The size: auto rows decide every second: a burst from idle is met by the first
# decision after it, and at 2 s one of every four starts met the queue a second later
# (98.98% within the SLO on the from-idle trace; 99.32% at 1 s).
AUTO_PERIOD_S = 1.0
# (trace, the burst multiple its pool is sized for); every trace's steady rate is
# BASE_JOBS_S (the working day's at midday; the noisy trace's pool is the 2x one).
TARGET_TRACES = (("step", 2.0), ("spike", 3.0), ("workday", 2.0), ("noisy", 2.0))
BASE_JOBS_S = 30.0
HEADROOM_TRACE = "workday"
UTILIZATIONS = (0.5, 0.6, 0.7, 0.8, 0.9)
PREDICT_TRACES = ("diurnal", "workday", "step:1.5", "noisy", "step", "spike")


def pool_size(model: ModelConfig, mean_cost: float, factor: float) -> int:
    """The replicas a burst of ``factor`` times the steady rate needs beyond the fleet
    sized for that rate, at the target utilisation: ``(factor - 1) x steady need``."""
    p = model.autoscaling
    mu = p.service_rate_cost_per_s or default_service_rate(model)
    steady_need = BASE_JOBS_S * mean_cost / (mu * p.target_utilization)
    return max(1, math.ceil((factor - 1.0) * steady_need - 1e-9))


def with_pool(model: ModelConfig, size: int, **policy: Any) -> ModelConfig:
    p = model.autoscaling
    pool = p.warm_pool.model_copy(update={"size": size})
    update = {"warm_pool": pool, "period_s": POOL_PERIOD_S, **policy}
    return model.model_copy(update={"autoscaling": p.model_copy(update=update)})


def with_policy(model: ModelConfig, **policy: Any) -> ModelConfig:
    p = model.autoscaling
    return model.model_copy(update={"autoscaling": p.model_copy(update=policy)})


def _row(label: str, trace: str, r: SimResult, oracle_rs: float, pool: int) -> dict[str, Any]:
    """The replay's row (``SimResult.summary``), named by its policy and pool."""
    d = r.summary()
    d.update(
        trace=trace,
        policy=label,
        pool=pool,
        slo_attainment=round(r.slo_attainment, 5),
        replica_seconds_vs_oracle=round(r.replica_seconds / (oracle_rs or 1.0), 3),
    )
    return d


def targets(model: ModelConfig) -> list[dict[str, Any]]:
    rows = []
    for name, factor in TARGET_TRACES:
        trace = traces.resolve(name)
        size = pool_size(model, trace.mean_cost, factor)
        oracle, bare = replay.run_trace(trace, model, ["sluice"])
        _, pooled = replay.run_trace(trace, with_pool(model, size), ["sluice"])
        rs = oracle.replica_seconds
        rows += [
            _row("oracle", name, oracle, rs, 0),
            _row("sluice", name, bare, rs, 0),
            _row(f"sluice+pool:{size}", name, pooled, rs, size),
        ]
    return rows


def headroom(model: ModelConfig) -> list[dict[str, Any]]:
    trace = traces.resolve(HEADROOM_TRACE)
    rows = []
    for u in UTILIZATIONS:
        bare_m = with_policy(model, target_utilization=u)
        size = pool_size(bare_m, trace.mean_cost, 2.0)
        oracle, bare = replay.run_trace(trace, bare_m, ["sluice"])
        _, pooled = replay.run_trace(trace, with_pool(bare_m, size), ["sluice"])
        rs = oracle.replica_seconds
        for label, r, n in (("sluice", bare, 0), (f"sluice+pool:{size}", pooled, size)):
            row = _row(label, HEADROOM_TRACE, r, rs, n)
            row["target_utilization"] = u
            rows.append(row)
    return rows


def predict(model: ModelConfig) -> list[dict[str, Any]]:
    rows = []
    on = model.autoscaling.predict.model_copy(update={"enabled": True})
    off = model.autoscaling.predict.model_copy(update={"enabled": False})
    for name in PREDICT_TRACES:
        trace = traces.resolve(name)
        for label, pr in (("predict off", off), ("predict on", on)):
            oracle, r = replay.run_trace(trace, with_policy(model, predict=pr), ["sluice"])
            rows.append(_row(label, name, r, oracle.replica_seconds, 0))
    return rows


def print_rows(title: str, rows: list[dict[str, Any]], extra: str | None = None) -> None:
    print(f"\n{title}")
    label = {"target_utilization": "util", "changes_over_oracle": "+chg"}.get(extra or "", "")
    head = (
        f"{'trace':<9} {label:>5} {'policy':<16} {'SLO met':>8} {'p99 wait':>9} "
        f"{'replica-s':>10} {'vs oracle':>9} {'pool-s':>7} {'events':>6} {'flaps':>5}"
    )
    print(head)
    print("-" * len(head))
    for d in rows:
        col = f"{d[extra]:>5}" if extra else " " * 5
        print(
            f"{d['trace']:<9} {col} {d['policy']:<16} {100 * d['slo_attainment']:>7.2f}% "
            f"{d['p99_wait_ms']:>7.0f}ms {d['replica_seconds']:>10.0f} "
            f"{d['replica_seconds_vs_oracle']:>8.2f}x {d['pool_seconds']:>7.0f} "
            f"{d['scale_events']:>6} {d['flaps']:>5}"
        )


def main(model: ModelConfig) -> dict[str, Any]:
    t0 = time.perf_counter()
    out: dict[str, Any] = {
        "auto": warm_pool_auto.targets(model, AUTO_PERIOD_S),
        "targets": targets(model),
        "headroom": headroom(model),
        "predict": predict(model),
    }
    title = "warm_pool.size: auto, one config (30 s cold start, 2 s promotion, parked at 0.1)"
    # +chg: direction changes beyond the oracle's on the same trace
    print_rows(title, out["auto"], "changes_over_oracle")
    auto = [d for d in out["auto"] if d["policy"] == "sluice+pool:auto"]
    print(f"targets met: {sum(warm_pool_auto.met(d) for d in auto)}/{len(auto)} traces")
    print_rows("Warm pool sized by hand per trace", out["targets"])
    title = f"Headroom: target_utilization on {HEADROOM_TRACE}"
    print_rows(title, out["headroom"], "target_utilization")
    print_rows("Predictive term", out["predict"])
    took = time.perf_counter() - t0
    print(f"({took:.0f} s)", file=sys.stderr)
    out["seconds"] = round(took, 1)
    out["policy"] = model.autoscaling.model_dump()
    out["pool_period_s"] = POOL_PERIOD_S
    out["auto_period_s"] = AUTO_PERIOD_S
    return out
