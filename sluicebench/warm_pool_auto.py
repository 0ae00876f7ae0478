"""``sluice bench warm-pool``'s first table: one config, ``warm_pool.size: auto``, on
every target trace (issue 32, docs/adr/0156 and 0157).

Each trace runs three ways against the oracle: Sluice's policy without a pool, with
the auto-sized pool and the history an autoscaler would have kept in Redis from an
earlier stretch of the same traffic (another draw of the same shape, replayed first,
its minutes moved to before this run: "yesterday"), and with the auto pool from no
history at all (its initial size until the history covers ``history_min_s``).
Direction changes are judged against the oracle's on the same trace: a change the
load asks for (a burst ends) is not a flap.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from autoscaler.policy import default_service_rate
from autoscaler.pool_size import PoolState
from autoscaler.sim import controllers, replay, simulator, traces
from autoscaler.sim.simulator import SimResult
from sluice.config import ModelConfig

AUTO_TRACES = ("step", "spike", "workday", "noisy", "from-idle")
YESTERDAY_SEED = 1000  # another draw of each shape: the history, not today's arrivals


def auto_model(model: ModelConfig, period_s: float) -> ModelConfig:
    """The one config of every "auto" row: ``size: auto``, decisions every ``period_s``."""
    p = model.autoscaling
    pool = p.warm_pool.model_copy(update={"size": "auto"})
    update = {"warm_pool": pool, "period_s": period_s}
    return model.model_copy(update={"autoscaling": p.model_copy(update=update)})


def run_auto(trace: traces.Trace, model: ModelConfig, pool: PoolState) -> SimResult:
    """Sluice's policy with the auto pool, from ``pool``'s history, the usual warm start."""
    p = model.autoscaling
    mu = default_service_rate(model)
    init = simulator.initial_replicas(trace, p, mu)
    ctl = controllers.SluicePolicy(p, pool=pool)
    return simulator.simulate(trace, ctl, p, mu, p.cold_start_s, init)


def yesterday(name: str, model: ModelConfig) -> PoolState:
    """The history an earlier stretch of the same traffic left: a replay of another
    draw of ``name``, its closed minutes moved to end a minute before this run starts."""
    trace = traces.resolve(name, seed=YESTERDAY_SEED)
    ctl = controllers.SluicePolicy(model.autoscaling)
    p = model.autoscaling
    mu = default_service_rate(model)
    simulator.simulate(trace, ctl, p, mu, p.cold_start_s, simulator.initial_replicas(trace, p, mu))
    minutes = (*ctl.pool.minutes, *((ctl.pool.open,) if ctl.pool.open else ()))
    end = max((m.start_s for m in minutes), default=0.0) + 2 * 60.0
    return PoolState(tuple(replace(m, start_s=m.start_s - end) for m in minutes))


def row(label: str, trace: str, r: SimResult, oracle: SimResult) -> dict[str, Any]:
    d = r.summary()
    d.update(
        trace=trace,
        policy=label,
        slo_attainment=round(r.slo_attainment, 5),
        replica_seconds_vs_oracle=round(r.replica_seconds / (oracle.replica_seconds or 1.0), 3),
        direction_changes=r.flaps,
        oracle_direction_changes=oracle.flaps,
        changes_over_oracle=r.flaps - oracle.flaps,
    )
    return d


def targets(
    model: ModelConfig, period_s: float, names: tuple[str, ...] = AUTO_TRACES
) -> list[dict[str, Any]]:
    auto = auto_model(model, period_s)
    rows = []
    for name in names:
        trace = traces.resolve(name)
        oracle, bare = replay.run_trace(trace, model, ["sluice"])
        warm = run_auto(trace, auto, yesterday(name, auto))
        cold = run_auto(trace, auto, PoolState())
        rows += [
            row("oracle", name, oracle, oracle),
            row("sluice", name, bare, oracle),
            row("sluice+pool:auto", name, warm, oracle),
            row("auto, no history", name, cold, oracle),
        ]
    return rows


def met(d: dict[str, Any]) -> bool:
    """The issue's targets: >= 99% within the SLO at <= 1.3x the oracle's replica-seconds,
    no more direction changes than the oracle."""
    return (
        d["slo_attainment"] >= 0.99
        and d["replica_seconds_vs_oracle"] <= 1.3
        and d["changes_over_oracle"] <= 0
    )
