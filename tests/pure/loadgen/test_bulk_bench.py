"""The bulk benchmark's arithmetic and verdicts (pure: no stack, no timing)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice.config import parse_config
from sluice.errors import ConfigError
from sluicebench.loadgen.bulk_figures import (
    BulkParams,
    Ran,
    Variant,
    batch_check,
    bulk_config,
    bulk_file,
    busy_fraction,
    check_output,
    idle_share,
    idle_time_share,
    nominal_capacity,
    parse_variants,
    summarise,
    verdict,
)


def test_nominal_capacity_counts_full_batches() -> None:
    p = BulkParams(workers=4, words=10, base_ms=5.0, per_token_ms=1.5, max_batch=8)
    assert nominal_capacity(p) == pytest.approx(256.0)  # 4 x 8 / (5 + 1.5 x 10 x 8 = 125 ms)
    assert nominal_capacity(p, batch=1) == pytest.approx(200.0)  # 4 x 1 / 20 ms


@pytest.mark.parametrize(
    ("bulk", "capacity", "util", "share"),
    [
        (72.0, 240.0, 0.6, 0.75),  # idle = 240 x 0.4 = 96 jobs/s
        (81.6, 240.0, 0.6, 0.85),  # exactly the target
        (0.0, 240.0, 0.6, 0.0),
        (10.0, 100.0, 1.0, None),  # no idle capacity: no share
    ],
)
def test_idle_share(bulk: float, capacity: float, util: float, share: float | None) -> None:
    assert idle_share(bulk, capacity, util) == share


def test_busy_fraction_per_worker_over_its_own_heartbeats() -> None:
    before = {"a": (100.0, 10, 80), "b": (100.5, 0, 0), "gone": (100.0, 0, 0)}
    after = {
        "a": (110.0, 60, 280),  # 50 x 5 ms + 200 x 15 ms = 3.25 s of 10 s
        "b": (102.5, 20, 60),  # 20 x 5 + 60 x 15 = 1.0 s of 2 s
        "new": (110.0, 5, 5),  # no earlier read: left out
    }
    assert busy_fraction(before, after, 5.0, 15.0) == pytest.approx((0.325 + 0.5) / 2, abs=1e-3)
    assert busy_fraction({}, after, 5.0, 15.0) is None
    assert busy_fraction({"a": (110.0, 60, 280)}, {"a": (110.0, 60, 280)}, 5.0, 15.0) is None


@pytest.mark.parametrize(
    ("p99_ratio", "share", "expected"),
    [
        (1.10, 0.85, {"p99_within": True, "idle_share": True}),  # both on the line
        (1.11, 0.90, {"p99_within": False, "idle_share": True}),
        (1.00, 0.84, {"p99_within": True, "idle_share": False}),
        (None, None, {"p99_within": None, "idle_share": None}),
    ],
)
def test_verdict(p99_ratio: float | None, share: float | None, expected: dict[str, Any]) -> None:
    assert verdict(p99_ratio, share) == expected


def _side(p50: float, p99: float, bulk_per_s: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "e2e_p50_ms": p50,
        "e2e_p99_ms": p99,
        "wait_p99_ms": p99 / 4,
        "busy_fraction": 0.6,
        "hold_mean_ms": 1.0,
        "batches": {"mean_size": 1.5, "over_limit": 0, "with_other_items": 0},
    }
    if bulk_per_s is not None:
        out["bulk"] = {"per_s": bulk_per_s, "idle_share": idle_share(bulk_per_s, 240.0, 0.6)}
    return out


def test_summarise_uses_paired_ratios() -> None:
    # Round 2 ran on a slower machine: both sides doubled, its ratio is unchanged.
    rounds = [
        {"without": _side(20.0, 100.0), "with": _side(22.0, 105.0, 90.0)},
        {"without": _side(40.0, 200.0), "with": _side(44.0, 230.0, 70.0)},
        {"without": _side(21.0, 110.0), "with": _side(23.0, 120.0, 84.0)},
    ]
    s = summarise(rounds)
    assert s["p99_ratio_per_round"] == [1.05, 1.15, 1.091]
    assert s["p99_ratio"] == 1.091  # the median round, not 120 / 110 of the medians
    assert s["without_p99_ms"] == 110.0 and s["with_p99_ms"] == 120.0
    assert s["p50_ratio"] == 1.1
    assert s["bulk_per_s"] == 84.0 and s["idle_share"] == pytest.approx(0.875)  # 84 / 96
    assert s["met"] == {"p99_within": True, "idle_share": True}
    assert s["batch_rule_breaks"] == 0 and s["batch_with"] == 1.5
    rounds[1]["with"]["batches"] = rounds[1]["with"]["batches"] | {"with_other_items": 2}
    assert summarise(rounds)["batch_rule_breaks"] == 2


def test_parse_variants() -> None:
    assert parse_variants("8, 2,1:no-overlap") == (
        Variant(8),
        Variant(2),
        Variant(1, overlap=False),
    )
    assert parse_variants("2:no-overlap:reserve1") == (Variant(2, overlap=False, reserve=1),)
    assert Variant(1, overlap=False).model == "bulk1" and Variant(8, reserve=2).model == "bulk8r2"
    assert parse_variants("8:micro2,8:reserve1:micro1") == (
        Variant(8, micro=2),
        Variant(8, reserve=1, micro=1),
    )
    assert Variant(8, micro=2).model == "bulk8m2"
    assert parse_variants("8:micro1:idle1") == (Variant(8, micro=1, idle=1),)
    assert Variant(8, micro=1, idle=1).model == "bulk8m1i1"
    for bad in ("", "0", "x", "8:fast", "8:reserve", "8:micro", "8:microx", "8:idle"):
        with pytest.raises(ConfigError):
            parse_variants(bad)


def test_config_loads_and_variants_differ_only_in_bulk_max_batch() -> None:
    p = BulkParams(variants=(Variant(8), Variant(2), Variant(2, overlap=False)), bulk_max_queued=16)
    cfg = bulk_config(p)
    models = parse_config(cfg).models
    assert set(models) == {"bulk8", "bulk2"}
    assert models["bulk2"].bulk.max_batch == 2 and models["bulk2"].bulk_max_queued == 16
    assert models["bulk8"].model_dump(exclude={"bulk"}) == models["bulk2"].model_dump(
        exclude={"bulk"}
    )


def test_bulk_file_lines_are_the_interactive_size() -> None:
    p = BulkParams(words=7)
    lines = bulk_file(p, 5).decode().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["custom_id"] for r in rows] == ["l0", "l1", "l2", "l3", "l4"]
    assert all(len(r["input"].split()) == 7 for r in rows)


def _out(line: int, status: str = "succeeded") -> dict[str, Any]:
    return {"line": line, "custom_id": f"l{line - 1}", "status": status}


def test_check_output_against_the_counts() -> None:
    counts = {"total": 4, "succeeded": 2}
    rows = [_out(1), _out(2), _out(3, "cancelled"), _out(4, "cancelled")]
    good = check_output(rows, counts)
    assert good["ok"] and good["by_status"] == {"cancelled": 2, "succeeded": 2}
    assert not check_output(rows[:3], counts)["ok"]  # a line lost
    assert not check_output([rows[1], rows[0], *rows[2:]], counts)["in_order"]
    assert not check_output([_out(1), _out(2), _out(3), _out(4, "cancelled")], counts)["ok"]
    swapped = [*rows[:3], {**rows[3], "custom_id": "l0"}]  # another line's output
    assert not check_output(swapped, counts)["custom_ids_match"]


def _batch(claim: int, n: int, run_ms: float) -> list[Ran]:
    """n interactive jobs that ran together (claimed at ``claim``)."""
    return [Ran((str(claim), str(claim + 30), f"{run_ms:.3f}"), run_ms) for _ in range(n)]


def test_batch_check_sizes_batches_and_finds_hidden_items() -> None:
    # 5 ms + 15 ms per item: 20.2 ms is 1 item, 50.4 ms is 3.
    jobs = [*_batch(100, 1, 20.2), *_batch(110, 3, 50.4), *_batch(120, 1, 20.1)]
    assert batch_check(jobs, 8, 5.0, 15.0) == {
        "batches": 3,
        "mean_size": 1.67,
        "over_limit": 0,
        "with_other_items": 0,
        "max_other_items": 0,
    }
    # Two interactive jobs in a batch that ran for four items: two other items rode along.
    hidden = batch_check([*jobs, *_batch(130, 2, 65.3)], 8, 5.0, 15.0)
    assert hidden["with_other_items"] == 1 and hidden["max_other_items"] == 2
    # A sleep that overran by 7 ms (under half an item) is not an item.
    assert batch_check(_batch(140, 1, 27.0), 8, 5.0, 15.0)["with_other_items"] == 0
    assert batch_check(_batch(150, 3, 50.0), 2, 5.0, 15.0)["over_limit"] == 1


@pytest.mark.parametrize(
    ("bulk", "capacity", "busy", "share"),
    [
        (60.0, 250.0, 0.70, 0.8),  # idle time = 250 x 0.3 = 75 jobs/s
        (75.0, 250.0, 0.70, 1.0),
        (10.0, 250.0, 1.0, None),  # never idle: no share
        (10.0, 250.0, None, None),  # busy not measured
    ],
)
def test_idle_time_share(
    bulk: float, capacity: float, busy: float | None, share: float | None
) -> None:
    assert idle_time_share(bulk, capacity, busy) == share
