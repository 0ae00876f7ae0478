"""``sluice bench load`` against a real gateway and synthetic worker on a private Redis."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sluicebench.loadgen.stack import Stack

pytestmark = [pytest.mark.system, pytest.mark.redis]

CONFIG = {
    "models": {
        "syn": {
            "handler": "synthetic",
            "params": {"base_ms": 1, "per_token_ms": 0.01},
            "buckets": [32, 128, 512],
            "cost": {"method": "words"},
            "batching": {"max_batch": 8, "max_batch_tokens": 4096},
        }
    }
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("loadgen-stack")
    cfg = tmp / "sluice.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    st = Stack(cfg, tmp / "logs").start()
    try:
        st.add_workers("syn", 1, timeout_s=30)
        yield st
    finally:
        st.close()


def _bench(stack: Stack, tmp_path: Path, *args: str) -> dict:  # type: ignore[type-arg]
    out = tmp_path / "load.json"
    cmd = [
        sys.executable,
        "-m",
        "sluice",
        "bench",
        "load",
        "--url",
        stack.url,
        "--model",
        "syn",
        "--no-progress",
        "--timeout-s",
        "20",
        "--json",
        str(out),
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "throughput" in proc.stdout and "e2e p99" in proc.stdout  # the printed report
    return json.loads(out.read_text())


@pytest.mark.parametrize("engine", ["lean", "httpx"])
def test_closed_loop_every_job_finishes(stack: Stack, tmp_path: Path, engine: str) -> None:
    data = _bench(stack, tmp_path, "--concurrency", "4", "--jobs", "60", "--engine", engine)
    assert data["spec"]["engine"] == engine
    assert data["sent"] == 60 and data["succeeded"] == 60 and data["finished"] == 60
    assert data["errors"] == {}
    assert data["throughput_per_s"] > 0
    # The default mix reaches more than one bucket; each row has the three latencies.
    assert len(data["buckets"]) >= 2 and sum(b["jobs"] for b in data["buckets"].values()) == 60
    for lat in [data, *data["buckets"].values()]:
        for name in ("e2e_ms", "queue_wait_ms", "run_ms"):
            assert {"p50", "p95", "p99", "count"} <= set(lat[name])
            assert lat[name]["count"] == lat["jobs"]
    assert data["e2e_ms"]["p99"] >= data["run_ms"]["p99"] > 0  # a job's own run is inside it
    assert set(data["bands"]) == {"5-20", "40-100", "200-300"}


def test_open_loop_poisson_every_job_finishes(stack: Stack, tmp_path: Path) -> None:
    data = _bench(stack, tmp_path, "--rate", "40", "--duration-s", "1.5", "--seed", "3")
    assert data["sent"] > 20 and data["succeeded"] == data["sent"]
    assert data["errors"] == {} and data["spec"]["mode"] == "poisson"
    assert data["send_lag_ms"]["count"] == data["sent"]
