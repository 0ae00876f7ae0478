"""Smoke test of the queue-hop benchmark on tiny sizes: shape and sanity, no timings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluice.errors import SluiceError
from sluicebench.queue_hop import main, parse_sizes

pytestmark = pytest.mark.system


def test_queue_hop_runs_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "hop.json"
    main(jobs=120, rq_jobs=10, batch_sizes="1,8", workers="1,2", json_path=out, repeats=2)
    data = json.loads(out.read_text())

    assert [(c["batch"], c["workers"]) for c in data["cases"]] == [(1, 1), (8, 1), (1, 2), (8, 2)]
    for c in data["cases"]:
        assert c["jobs"] == 120
        for rate in ("submit_jobs_per_s", "drain_jobs_per_s", "hop_jobs_per_s"):
            assert c[rate] > 0
        # Every job drained took at least one claim, and batches never exceed the size.
        assert 120 / c["batch"] <= c["batches"] <= 120
        # Measured in the client: claim + complete per batch, plus one final empty claim
        # per worker, and each submit chunk is one round trip.
        assert 2.0 <= c["worker_round_trips_per_batch"] <= 3.0
        assert c["submit_round_trips_per_call"] == 1.0
        assert c["worker_command_calls"]["evalsha"] == 2 * c["batches"] + c["workers"]
        assert c["worker_commands_per_job"] > 0 and c["submit_commands_per_job"] > 0
        assert c["drain_vs_rq_worker"] > 0
        assert (
            len(c["drain_jobs_per_s_runs"]) == 2
            and c["drain_jobs_per_s"] in c["drain_jobs_per_s_runs"]
        )

    rq = data["rq"]
    assert rq["jobs"] == 10 and rq["worker_jobs_per_s"] > 0 and rq["commands_per_job"] > 0
    assert len(rq["worker_jobs_per_s_runs"]) == 2
    assert data["summary"]["max_worker_round_trips_per_batch"] <= 3.0
    assert data["summary"]["batch32_1worker_drain_vs_rq_worker"] is None  # batch 32 not run


@pytest.mark.parametrize("text", ["", "0", "1,x", "-4"])
def test_parse_sizes_rejects_bad_lists(text: str) -> None:
    with pytest.raises(SluiceError):
        parse_sizes(text, "batch sizes")


def test_parse_sizes_reads_comma_lists() -> None:
    assert parse_sizes("1, 8,32", "batch sizes") == [1, 8, 32]
