"""`sluice bench gateway --keys` measures the keyed gateway side by side (tiny sizes)."""

from __future__ import annotations

from pathlib import Path

from sluicebench.gateway_bench import KEYED, main


def test_bench_with_keys_runs_the_keyed_gateway_without_errors(tmp_path: Path) -> None:
    result = main(
        rates=[50],
        duration_s=0.5,
        processes=[1],
        longpoll_rate=50,
        json_path=tmp_path / "gw.json",
        keys=True,
    )
    runs = {(r["server"], r["offered_rps"]): r for r in result["runs"]}
    assert {(KEYED, 50), (KEYED, None)} <= set(runs)
    # Every request a 202: a missing or refused key would count as an error (401/429).
    assert runs[(KEYED, 50)]["ok"] == 25 and runs[(KEYED, None)]["errors"] == 0
    assert result["saturation_ratio_with_keys"][f"{KEYED}/gateway, 1 process(es)"] > 0
