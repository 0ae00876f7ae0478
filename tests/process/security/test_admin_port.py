"""`sluice gateway` with gateway.admin_port: two listeners in one process."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import yaml

from sluice.local.children import Children
from sluice.local.redis_server import free_port
from tests.kit.http import HTTP
from tests.waits import wait_http


def _write(tmp: Path, gateway: dict[str, object]) -> Path:
    cfg = tmp / "sluice.yaml"
    model = {"handler": "synthetic", "autoscaling": {"min_replicas": 0}}
    cfg.write_text(yaml.safe_dump({"models": {"m": model}, "gateway": gateway}))
    return cfg


def test_admin_routes_move_to_the_admin_port_and_sigterm_stops_both(
    tmp_path: Path, redis_url: str
) -> None:
    port, admin = free_port(), free_port()
    cfg = _write(tmp_path, {"port": port, "admin_port": admin})
    children = Children(tmp_path / "logs")
    proc = children.spawn(
        "gateway", ["gateway", "--config", str(cfg), "--redis-url", redis_url]
    ).proc
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc, 30)
        wait_http(f"http://127.0.0.1:{admin}/healthz", proc, 30)
        api, adm = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin}"
        assert HTTP.get(f"{api}/metrics").status_code == 404
        assert HTTP.get(f"{api}/dashboard/api/state").status_code == 404
        submitted = HTTP.post(f"{api}/v1/models/m/jobs", json={"input": "x"})
        assert submitted.status_code == 202
        metrics = HTTP.get(f"{adm}/metrics")
        assert metrics.status_code == 200 and "sluice_jobs_submitted_total" in metrics.text
        assert HTTP.get(f"{adm}/v1/models").status_code == 404
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == -signal.SIGTERM  # re-raised, as uvicorn does with one listener
    finally:
        children.stop(children.all, timeout_s=0)  # SIGTERM then SIGKILL, if still running


def test_workers_over_one_with_an_admin_port_is_refused(tmp_path: Path) -> None:
    cfg = _write(tmp_path, {"port": free_port(), "admin_port": free_port()})
    r = subprocess.run(
        [sys.executable, "-m", "sluice", "gateway", "--config", str(cfg), "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "admin_port" in r.stderr
