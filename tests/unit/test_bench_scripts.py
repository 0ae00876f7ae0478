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
    assert "Usage" in out.stdout
