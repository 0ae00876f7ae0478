"""The `sluice worker` process at start: a synthetic worker never imports torch,
and a dtype the device cannot run is refused with exit 2 and the setting named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from sluice.config import parse_config
from tests.kit.workers import MODEL

NO_HALF = "tests.kit.fault_handlers:NoHalfKernelsHandler"


def test_a_synthetic_worker_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "from sluice.cli import app\n"
        "from workers.main import resolve_device\n"
        "from workers.handlers import load_handler_class\n"
        "cls = load_handler_class('synthetic')\n"
        "assert resolve_device('auto', cls.uses_torch) == 'cpu'\n"
        "import workers.worker, workers.execute, workers.housekeeping\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_sluice_worker_refuses_it_at_start_with_exit_2(tmp_path: Path, redis_url: str) -> None:
    cfg = parse_config({"models": {MODEL: {"handler": NO_HALF, "params": {"dtype": "fp16"}}}})
    path = tmp_path / "sluice.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json", exclude_none=True)))
    cmd = [
        sys.executable,
        "-c",
        "from sluice.cli import main; main()",
        "worker",
        "-c",
        str(path),
        "-m",
        MODEL,
        "--device",
        "cpu",
        "--redis-url",
        redis_url,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "models.m.params.dtype 'fp16' on cpu" in out.stderr
    assert "Traceback" not in out.stderr
