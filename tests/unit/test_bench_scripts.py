"""Every bench/ script starts: none is shadowed by a package of the same name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_runs_its_command(script: Path) -> None:
    out = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr[-500:]
    assert "usage" in out.stdout.lower()  # typer says Usage, argparse usage


def test_a_script_whose_benchmark_spawns_processes_runs(tmp_path: Path) -> None:
    # Spawned workers re-import the script by path: its imports must resolve there too.
    out_json = tmp_path / "q.json"
    args = ["--jobs", "200", "--rq-jobs", "20", "--batch-sizes", "8", "--workers", "1",
            "--repeat", "1", "--json", str(out_json)]  # fmt: skip
    out = subprocess.run([sys.executable, str(BENCH / "queue_hop.py"), *args],
                         capture_output=True, text=True, timeout=180)  # fmt: skip
    assert out.returncode == 0, out.stderr[-800:]
    assert out_json.exists()
