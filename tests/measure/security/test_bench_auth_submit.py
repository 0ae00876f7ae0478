"""`sluice bench auth-submit` measures both cases on tiny sizes and writes JSON."""

from __future__ import annotations

import json
from pathlib import Path

from sluicebench.scripts import auth_submit as mod


def test_auth_submit_bench_compares_open_and_keyed(tmp_path: Path) -> None:
    out = tmp_path / "auth.json"
    result = mod.main(jobs=50, rounds=1, json_path=out)
    assert json.loads(out.read_text())["median"] == result["median"]
    assert set(result["median"]) == {"open", "keyed"}
    assert result["median"]["open"]["redis_us_per_call"] > 0
    assert result["ratio_keyed_over_open"]["redis_us_per_call"] > 0
