"""Smoke test of ``sluice bench cost`` on tiny sizes: shape and sanity, no timings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluicebench.cost_bench import main

pytestmark = pytest.mark.system


def test_cost_bench_runs_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    main("predict,batch", "8", 0.5, 4, 0.3, None, out, idle_seconds=0.2)
    data = json.loads(out.read_text())

    rows = {r["route"]: r for r in data["this"]["rows"]}
    assert set(rows) == {"predict", "batch"} and "other" not in data
    for r in rows.values():
        assert r["batch"] == 8 and r["jobs_per_s"] > 0
        assert r["redis_commands_per_job"] > 0 and 0 < r["mean_batch"] <= 8
    # Counted in the gateway's connections: a predict's submit and reads are shared with
    # the predicts of the same event-loop turn (ADR 0161), so only "some" is certain.
    assert rows["predict"]["gateway_round_trips_per_job"] > 0
    # Redis's own timing per command, for the breakdown in docs/benchmarks/cost.md.
    phase = data["this"]["runs"][0]["phases"][0]
    assert phase["redis_usec_per_job"]["evalsha"] > 0
    # A batch of 32 inputs is one submit and one long-poll: well under one per job.
    assert rows["batch"]["gateway_round_trips_per_job"] < 1.0
    prof = data["this"]["profiles"]
    assert set(prof) == {"predict", "batch"} and all(p["top"] for p in prof.values())
    assert len(data["this"]["projection"]) == 2 * 2  # two routes, two target rates
    assert "gateway_cpu_ms_per_job" in data["this"]["targets"]


def test_cost_duel_runs_two_stacks_at_once(tmp_path: Path) -> None:
    from sluicebench.cost_duel import duel

    here = Path(__file__).resolve().parents[3]
    data = duel(here, here, "predict", rounds=1, seconds=0.3, clients=2)
    (r,) = data["rounds"]
    assert min(r["jobs"]) > 0 and r["a_us"] > 0 and r["b_us"] > 0
    assert data["b_over_a_geomean"] == r["b_over_a"]
