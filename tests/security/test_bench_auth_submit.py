"""bench/auth_submit.py measures both cases on tiny sizes and writes JSON."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "auth_submit.py"


def test_auth_submit_bench_compares_open_and_keyed(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("auth_submit", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "auth.json"
    result = mod.main(jobs=50, rounds=1, json_path=out)
    assert json.loads(out.read_text())["median"] == result["median"]
    assert set(result["median"]) == {"open", "keyed"}
    assert result["median"]["open"]["redis_us_per_call"] > 0
    assert result["ratio_keyed_over_open"]["redis_us_per_call"] > 0
