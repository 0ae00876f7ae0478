"""``sluice bench generate`` end to end in its smallest shape: the tiny 2x64 model,
a few requests, (a) on ``sluice up`` and (e) in process. Checks the report's shape
and its JSON, never its figures (the machine is shared: timings are the
benchmark's to report, not a test's to assert)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(
        find_spec("workers.generate.hf_engine") is None
        or find_spec("workers.generate.handler") is None
        or find_spec("gateway.openai_generate") is None,
        reason="needs the generative worker and the gateway's /v1/completions",
    ),
]

FIGURES = ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")
ROOT = Path(__file__).resolve().parents[3]
SMALL = [
    "--systems", "a,c,e",
    "--model", "tiny:2x64",
    "--duration", "3", "--warm", "1", "--open-s", "2", "--open-rate", "6",
    "--concurrency", "4", "--slots", "4", "--requests", "24", "--mix", "8:0.5,16:0.5",
]  # fmt: skip


def test_a_small_run_reports_every_system_and_target(tmp_path: Path) -> None:
    out = tmp_path / "generate.json"
    # The tiny model from the machine's cache (built once, atomically, by whichever
    # test or process needs it first): building it again here cost 10-15 s.
    env = os.environ | {
        "SLUICE_BENCH_RAY_VENV": str(tmp_path / "no-ray-venv"),  # (c) must skip, not fail
    }
    done = subprocess.run(
        [sys.executable, "-m", "sluice", "bench", "generate", *SMALL,
         "--log-dir", str(tmp_path / "logs"), "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(out.read_text())
    assert set(data["systems"]) == {"a", "c", "e"}
    assert "make bench-peers" in data["systems"]["c"]["skipped"]
    for name in ("a", "e"):
        for loop in ("closed", "open"):
            ph = data["systems"][name][loop]
            assert ph["errors"] == 0, ph["first_error"]
            assert ph["requests"] > 0 and ph["output_tokens"] > 0, (name, loop, ph)
            assert {
                "tokens_per_s",
                "ttft_p50_ms",
                "ttft_p99_ms",
                "itl_p50_ms",
                "itl_p99_ms",
            } <= set(ph)
            assert ph["cpu"], "no CPU read for the system's processes"
    assert "worker" in data["systems"]["a"]["closed"]["cpu"]
    assert data["open_rate_rps"] == 6.0
    assert {t["verdict"] for t in data["targets"]} <= {"PASS", "MISS", "n/a"}
    assert len(data["targets"]) == 5
    assert "(a) sluice continuous" in done.stdout and "(e) engine in process" in done.stdout
