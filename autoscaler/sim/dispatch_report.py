"""``sluice simulate --dispatch`` and ``sluice bench dispatch``: the comparison table.

Every strategy runs on the same trace and the same fleet; the mixed trace is
generated once per utilisation (its rate set so the offered load is that share
of the fleet's capacity), any other trace is replayed as it is. Short and long
jobs (or each bucket, when the trace fills more than two) are reported apart,
since the whole point of buckets is what happens to the short ones.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Any

from autoscaler.policy import default_service_rate
from autoscaler.sim import dispatch, traces
from autoscaler.sim.dispatch import Fleet, Run
from sluice.config import ModelConfig
from sluice.errors import ConfigError

BENCH_UTILIZATIONS = (0.7, 0.9)
DEFAULT_REPLICAS = 8
DEFAULT_JOBS = 40_000
BASELINE = "round-robin"


@dataclass(frozen=True)
class Setup:
    trace: str  # "mixed" or any spec traces.resolve takes
    strategies: tuple[str, ...]
    utilizations: tuple[float, ...]  # used by the mixed trace only
    replicas: int = DEFAULT_REPLICAS
    jobs: int = DEFAULT_JOBS  # per mixed trace
    seed: int = 5


def parse_strategies(spec: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in spec.split(",") if s.strip())
    bad = [s for s in names if s not in dispatch.STRATEGIES]
    if bad or not names:
        raise ConfigError(
            f"--dispatch {spec!r}: use a comma-separated list of {', '.join(dispatch.STRATEGIES)}"
        )
    return names


def parse_utilizations(spec: str) -> tuple[float, ...]:
    try:
        us = tuple(float(s) for s in spec.split(",") if s.strip())
    except ValueError as e:
        raise ConfigError(f"--utilization {spec!r}: comma-separated numbers") from e
    if not us or any(not 0 < u < 1 for u in us):
        raise ConfigError(f"--utilization {spec!r}: each must be in (0, 1)")
    return us


def fleet_for(model: ModelConfig, replicas: int, service_rate: float | None) -> Fleet:
    if replicas < 1:
        raise ConfigError(f"--replicas {replicas}: need at least 1")
    if service_rate is not None and service_rate <= 0:
        raise ConfigError(f"--service-rate {service_rate}: must be > 0")
    return Fleet(
        replicas,
        service_rate or default_service_rate(model),
        tuple(model.buckets),
        model.batching.overdue_factor,
    )


def mixed_at(utilization: float, fleet: Fleet, jobs: int, seed: int) -> traces.Trace:
    """The mixed trace with its rate set for ``utilization`` of the fleet's capacity."""
    mean = traces.mixed(rate=1.0, duration_s=0.0).mean_cost
    rate = utilization * fleet.replicas * fleet.service_rate / mean
    return traces.mixed(rate=rate, duration_s=jobs / rate, seed=seed)


def percentile(sorted_xs: list[float], q: float) -> float:
    """Nearest rank, as the autoscaler simulator reports its p99."""
    return sorted_xs[min(len(sorted_xs) - 1, math.ceil(q * len(sorted_xs)) - 1)]


def class_names(r: Run) -> dict[int, str]:
    used = sorted(set(r.bucket))
    if len(used) == 2:
        return {used[0]: "short", used[1]: "long"}
    return {b: f"<={r.fleet.buckets[b]}" for b in used}


def summarize(r: Run, utilization: float) -> list[dict[str, Any]]:
    """One row per job class: p50/p99 queue wait and end-to-end, in ms."""
    out = []
    for b, name in class_names(r).items():
        js = [j for j, jb in enumerate(r.bucket) if jb == b]
        w = sorted(r.wait_s(j) for j in js)
        e = sorted(r.e2e_s(j) for j in js)
        out.append(
            {
                "utilization": round(utilization, 3),
                "strategy": r.strategy,
                "class": name,
                "jobs": len(js),
                "wait_p50_ms": round(1000 * percentile(w, 0.5), 1),
                "wait_p99_ms": round(1000 * percentile(w, 0.99), 1),
                "e2e_p50_ms": round(1000 * percentile(e, 0.5), 1),
                "e2e_p99_ms": round(1000 * percentile(e, 0.99), 1),
            }
        )
    return out


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """How many times lower each row's p99 is than round-robin's, same utilisation and
    class (None when round-robin did not run, or a p99 wait of 0 makes it infinite)."""
    base = {(d["utilization"], d["class"]): d for d in rows if d["strategy"] == BASELINE}
    for d in rows:
        rr = base.get((d["utilization"], d["class"]))
        for k in ("wait_p99_ms", "e2e_p99_ms"):
            ok = rr is not None and d[k] > 0
            d[f"{k[:-3]}_vs_rr"] = round(rr[k] / d[k], 2) if ok and rr else None


def compare(setup: Setup, fleet: Fleet) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if setup.trace == "mixed":
        pairs = [(u, mixed_at(u, fleet, setup.jobs, setup.seed)) for u in setup.utilizations]
    else:
        tr = traces.resolve(setup.trace)
        pairs = [(dispatch.offered_utilization(tr, fleet), tr)]
    for u, tr in pairs:
        offered = round(dispatch.offered_utilization(tr, fleet), 4)  # the sample's, near u
        for s in setup.strategies:
            part = summarize(dispatch.run(s, tr, fleet, seed=setup.seed), u)
            rows += [{**d, "offered_utilization": offered} for d in part]
    add_ratios(rows)
    return rows


def _ratio(v: float | None) -> str:
    return f"{v:.1f}x" if v is not None else "-"


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'util':>5} {'strategy':<18} {'class':<6} {'jobs':>6} {'wait p50':>9} "
        f"{'wait p99':>9} {'e2e p50':>9} {'e2e p99':>9} {'RR/p99 wait':>11} "
        f"{'RR/p99 e2e':>10}"
    )
    print(head)
    print("-" * len(head))
    for d in rows:
        print(
            f"{d['utilization']:>5.2f} {d['strategy']:<18} {d['class']:<6} {d['jobs']:>6} "
            f"{d['wait_p50_ms']:>7.0f}ms {d['wait_p99_ms']:>7.0f}ms "
            f"{d['e2e_p50_ms']:>7.0f}ms {d['e2e_p99_ms']:>7.0f}ms "
            f"{_ratio(d['wait_p99_vs_rr']):>11} {_ratio(d['e2e_p99_vs_rr']):>10}"
        )


def dispatch_cmd(model: ModelConfig, setup: Setup, service_rate: float | None) -> dict[str, Any]:
    """Run, print the table, return what --json writes."""
    if setup.jobs < 100:
        raise ConfigError(f"--jobs {setup.jobs}: use at least 100 for a p99 to mean anything")
    t0 = time.perf_counter()
    fleet = fleet_for(model, setup.replicas, service_rate)
    rows = compare(setup, fleet)
    print_table(rows)
    sys.stdout.flush()  # the table before the stderr footer when both go to a terminal
    took = time.perf_counter() - t0
    print(
        f"({len(rows)} rows in {took:.1f} s; {fleet.replicas} workers at "
        f"{fleet.service_rate:g} units/s; RR/p99 = round-robin's p99 / this one's)",
        file=sys.stderr,
    )
    return {
        "trace": setup.trace,
        "replicas": fleet.replicas,
        "service_rate_cost_per_s": fleet.service_rate,
        "buckets": list(fleet.buckets),
        "overdue_factor": fleet.overdue_factor,
        "jobs_per_trace": setup.jobs,
        "seed": setup.seed,
        "seconds": round(took, 1),
        "results": rows,
    }
