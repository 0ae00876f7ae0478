"""``sluice worker`` as a real process: SIGTERM drains, SIGKILL loses nothing, metrics."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
import yaml

from sluice import registry
from sluice.config import SluiceConfig
from sluice.jobs import JobStatus
from sluice.queue import QueueClient
from tests.kit.http import HTTP
from tests.kit.workers import MODEL, SLUICE, Running, submit, worker_config
from tests.waits import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.system]


def slow_config(batch_ms: int, lease_s: float = 5.0) -> SluiceConfig:
    return worker_config(
        "synthetic",
        {"base_ms": batch_ms, "per_token_ms": 0},
        batching={"max_batch": 2, "lease_s": lease_s},
    )


def test_sigterm_finishes_held_jobs_deregisters_and_exits_0(
    r: redis.Redis, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    cfg = slow_config(600)
    qc = QueueClient(r, dict(cfg.models))
    submit(qc, cfg, ["x"] * 10)
    proc = spawn(cfg, "--metrics-port", "-1")
    wait_until(lambda: qc.stats(MODEL).in_flight > 0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    stats = qc.stats(MODEL)
    assert stats.in_flight == 0  # everything it held was completed, not abandoned
    assert stats.counters["succeeded"] >= 2 and stats.counters.get("retried", 0) == 0
    assert qc.run(registry.list_workers_call(MODEL))[0] == []


def test_sigkill_mid_batch_loses_no_job(
    r: redis.Redis,
    spawn: Callable[..., subprocess.Popen[bytes]],
    start_worker: Callable[..., Running],
) -> None:
    cfg = slow_config(300, lease_s=1.0)
    qc = QueueClient(r, dict(cfg.models))
    ids = submit(qc, cfg, ["x"] * 12)
    proc = spawn(cfg, "--metrics-port", "-1")
    wait_until(lambda: qc.stats(MODEL).in_flight > 0)
    proc.kill()
    proc.wait(5)
    killed = qc.stats(MODEL)
    assert killed.in_flight > 0  # it died holding leases
    second = start_worker(cfg)
    wait_until(lambda: qc.stats(MODEL).counters.get("succeeded") == len(ids), timeout_s=20)
    recs = [qc.get(i) for i in ids]
    assert all(x.status == JobStatus.SUCCEEDED for x in recs)
    assert sum(1 for x in recs if x.attempts == 2) == killed.in_flight  # re-run elsewhere
    assert qc.stats(MODEL).counters.get("failed", 0) == 0
    second.worker.drain()
    assert second.join() == 0


def test_metrics_endpoint_counts_jobs(
    r: redis.Redis, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    cfg = worker_config("synthetic", {"base_ms": 0, "per_token_ms": 0})
    qc = QueueClient(r, dict(cfg.models))
    submit(qc, cfg, ["a b c"] * 6)
    proc = spawn(cfg, "--metrics-port", "0")
    wait_until(lambda: qc.stats(MODEL).counters.get("succeeded") == 6)
    live = wait_until(lambda: qc.run(registry.list_workers_call(MODEL))[0])
    port = live[0].metrics_port
    text = HTTP.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    assert 'sluice_worker_jobs_total{model="m",status="succeeded"} 6.0' in text
    assert 'sluice_worker_state{model="m",state="ready"} 1.0' in text
    assert 'sluice_worker_padding_efficiency{model="m"} 1.0' in text
    assert "sluice_worker_batch_size_bucket" in text
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0


def test_unknown_model_is_one_clear_line(tmp_path: Path, redis_url: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(worker_config().model_dump(mode="json", exclude_none=True)))
    cmd = [*SLUICE, "worker", "-c", str(path), "-m", "nope", "--redis-url", redis_url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "unknown model 'nope'" in proc.stderr and "Traceback" not in proc.stderr
