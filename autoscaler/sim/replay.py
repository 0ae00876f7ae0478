"""``sluice simulate`` and ``sluice bench autoscaler``: replay traces, compare policies.

Every run includes the oracle, so each policy's replica-seconds is also shown as
a ratio to what perfect foresight needed on the same trace.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from autoscaler.policy import default_service_rate
from autoscaler.sim import controllers, simulator, traces
from autoscaler.sim.simulator import SimResult
from sluice.config import ModelConfig, WarmPoolConfig
from sluice.errors import ConfigError

BENCH_TRACES = ("step", "step:1.5", "spike", "spike:1.5", "diurnal", "noisy")
BENCH_POLICIES = ("sluice", "queue-length", "ongoing", "fixed:peak")


def pick_model(models: dict[str, ModelConfig], name: str | None) -> tuple[str, ModelConfig]:
    if name is None:
        if len(models) != 1:
            raise ConfigError(f"the config has {len(models)} models: pass --model ({list(models)})")
        name = next(iter(models))
    if name not in models:
        raise ConfigError(f"unknown model {name!r}; the config has {list(models)}")
    return name, models[name]


def run_trace(
    trace: traces.Trace,
    model: ModelConfig,
    policies: list[str],
    service_rate: float | None = None,
    cold_start_s: float | None = None,
    capacity_cost_per_s: float | None = None,
) -> list[SimResult]:
    """The oracle first, then each policy, all from the same warm start; with
    ``capacity_cost_per_s``, the replicas share that much drain rate (the oracle
    does not: it is the yardstick of what the load needs)."""
    p = model.autoscaling
    mu = service_rate or default_service_rate(model)
    cold = p.cold_start_s if cold_start_s is None else cold_start_s
    init = simulator.initial_replicas(trace, p, mu)
    # Only Sluice's policy keeps a warm pool: the oracle and the baselines run without.
    bare = p.model_copy(update={"warm_pool": WarmPoolConfig()})
    orc = simulator.oracle(trace, bare, mu, cold)
    results = [simulator.simulate(trace, orc, bare, mu, cold, init)]
    for spec in policies:
        if spec == "fixed:peak":  # a fleet sized once for the oracle's peak
            spec = f"fixed:{results[0].max_replicas}"
        ctl = controllers.parse_policy(spec, p)
        start = int(spec.split(":")[1]) if spec.startswith("fixed:") else init
        sim_p = p if spec.partition(":")[0] == "sluice" else bare
        results.append(simulator.simulate(trace, ctl, sim_p, mu, cold, start, capacity_cost_per_s))
    return results


def rows(results: list[SimResult]) -> list[dict[str, Any]]:
    oracle_rs = results[0].replica_seconds or 1.0
    out = []
    for r in results:
        d = r.summary()
        d["replica_seconds_vs_oracle"] = round(r.replica_seconds / oracle_rs, 3)
        # Direction changes the load did not ask for (ADR 0157): beyond the oracle's.
        d["changes_over_oracle"] = r.flaps - results[0].flaps
        d["slo_attainment"] = round(r.slo_attainment, 5)
        out.append(d)
    return out


def print_table(all_rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'trace':<11} {'policy':<14} {'jobs':>7} {'SLO met':>8} {'p99 wait':>9} "
        f"{'replica-s':>10} {'vs oracle':>9} {'events':>6} {'flaps':>5} {'peak':>4}"
    )
    print(head)
    print("-" * len(head))
    for d in all_rows:
        print(
            f"{d['trace']:<11} {d['policy']:<14} {d['jobs']:>7} "
            f"{100 * d['slo_attainment']:>7.2f}% {d['p99_wait_ms']:>7.0f}ms "
            f"{d['replica_seconds']:>10.0f} {d['replica_seconds_vs_oracle']:>8.2f}x "
            f"{d['scale_events']:>6} {d['flaps']:>5} {d['max_replicas']:>4}"
        )


def plot(results: list[SimResult], path: Path) -> None:
    """Replicas, queue depth and recent p99 wait over time, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    for r in results:
        ts = [x[0] for x in r.timeline]
        for ax, k in zip(axes, (1, 2, 3), strict=True):
            ax.plot(ts, [x[k] for x in r.timeline], label=r.policy, linewidth=1)
    for ax, label in zip(axes, ("replicas", "queued jobs", "p99 wait (ms, 30 s)"), strict=True):
        ax.set_ylabel(label)
    axes[2].set_xlabel("time (s)")
    axes[0].legend(loc="upper right", fontsize="small")
    axes[0].set_title(f"trace {results[0].trace}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}", file=sys.stderr)


def simulate_cmd(
    model: ModelConfig,
    trace_spec: str,
    policies: list[str],
    service_rate: float | None,
    cold_start_s: float | None,
    plot_path: Path | None,
    capacity_cost_per_s: float | None = None,
) -> dict[str, Any]:
    t0 = time.perf_counter()
    trace = traces.resolve(trace_spec)
    results = run_trace(trace, model, policies, service_rate, cold_start_s, capacity_cost_per_s)
    table = rows(results)
    print_table(table)
    if plot_path is not None:
        plot(results, plot_path)
    took = time.perf_counter() - t0
    print(f"({len(results)} runs in {took:.1f} s)", file=sys.stderr)
    return {
        "trace": trace.name,
        "results": table,
        "oracle_replica_seconds": results[0].replica_seconds,
        "capacity_cost_per_s": capacity_cost_per_s,
    }


def bench_cmd(
    model: ModelConfig, trace_specs: list[str], policies: list[str], cold_start_s: float | None
) -> dict[str, Any]:
    t0 = time.perf_counter()
    all_rows: list[dict[str, Any]] = []
    for spec in trace_specs:
        all_rows += rows(run_trace(traces.resolve(spec), model, policies, None, cold_start_s))
    print_table(all_rows)
    took = time.perf_counter() - t0
    print(f"({len(all_rows)} runs in {took:.1f} s)", file=sys.stderr)
    return {
        "results": all_rows,
        "seconds": round(took, 1),
        "policy": model.autoscaling.model_dump(),
    }
