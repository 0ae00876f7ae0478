"""Smoke test of `sluice bench gateway` on tiny sizes (the figures are in docs/benchmarks)."""

from __future__ import annotations

import json
from pathlib import Path

from sluicebench.gateway_bench import main


def test_bench_runs_every_server_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "gateway.json"
    result = main(rates=[50], duration_s=0.5, processes=[1], longpoll_rate=50, json_path=out)
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    runs = {(r["server"], r["offered_rps"]): r for r in result["runs"]}
    assert set(runs) == {("bare", 50), ("bare", None), ("gateway", 50), ("gateway", None)}
    assert all(r["errors"] == 0 and r["ok"] > 0 for r in runs.values())
    assert runs[("gateway", 50)]["ok"] == 25  # 50/s for 0.5 s, every one a 202
    lp = result["longpoll"]
    assert lp["jobs"] == 25 and lp["not_succeeded"] == 0
    # Polls woken by their job's completion: the bench gives each poll a 20 ms head
    # start, which a loaded machine does not always honour (a poll that reaches the
    # gateway after its completion is answered from the record, still succeeded,
    # above); at least one was woken, and none twice.
    assert 1 <= lp["gateway_share"]["count"] <= 25
    assert result["saturation_ratio_gateway_over_bare"]["1 process(es)"] > 0


def test_stall_bench_measures_every_way_and_writes_json(tmp_path: Path) -> None:
    from sluicebench.gateway_stall import main as stall

    out = tmp_path / "stall.json"
    rows = stall(json_path=out, sizes=(5_000,))
    assert json.loads(out.read_text())["rows"] == rows
    assert set(rows[0]) == {"chars", "inline", "thread_gil_held", "now"}
    assert all(rows[0][k] > 0 for k in ("inline", "thread_gil_held", "now"))
