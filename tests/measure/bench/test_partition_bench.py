"""Smoke test of the partition benchmark on tiny sizes: shape and the spread, no timings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluicebench.partition_bench import main

pytestmark = pytest.mark.system


def test_partition_bench_spreads_commands_over_the_shards(tmp_path: Path) -> None:
    out = tmp_path / "partitions.json"
    assert main(["--jobs", "64", "--batch", "8", "--json", str(out), "--no-mark"]) == 0
    one, three = json.loads(out.read_text())["runs"]
    assert (one["partitions"], three["partitions"]) == (1, 3)
    busy_one = [s for s in one["shards"] if s["commands_per_job"] > 0]
    assert len(busy_one) == 1  # one partition: every command on one shard
    assert all(s["commands_per_job"] > 0 for s in three["shards"])  # three: on all three
    total = sum(s["commands_per_job"] for s in three["shards"])
    assert max(s["commands_per_job"] for s in three["shards"]) < total / 2
