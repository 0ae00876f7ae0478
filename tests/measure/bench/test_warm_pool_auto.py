"""`sluice bench warm-pool`'s size: auto table on its from-idle trace (issue 32): one
deterministic replay pass, checked against the issue's targets."""

from __future__ import annotations

from pathlib import Path

from sluice.config import load_config
from sluicebench import warm_pool_auto

ROOT = Path(__file__).resolve().parents[3]


def test_the_auto_pool_meets_the_targets_from_idle() -> None:
    # A few seconds: yesterday's draw, then the oracle, no pool, auto and auto from nothing.
    model = load_config(ROOT / "bench" / "autoscaler_sim.yaml").models["sim"]
    rows = {d["policy"]: d for d in warm_pool_auto.targets(model, 1.0, ("from-idle",))}
    auto = rows["sluice+pool:auto"]
    assert warm_pool_auto.met(auto), auto
    assert auto["promotions"] > 0 and auto["pool_seconds"] > 0
    # Without a pool the same policy misses the SLO: the pool is what meets it.
    assert rows["sluice"]["slo_attainment"] < 0.99
