"""End to end: the local backend spawns real ``sluice worker`` processes (synthetic
handler) against a real Redis. A burst scales up, workers become ready, the queue
drains, idle workers are drained after the window, and no job is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from autoscaler.backends.local import LocalBackend
from autoscaler.loop import Autoscaler
from autoscaler.observe import Observer
from autoscaler.reload import PolicySource
from sluice.config import load_config
from sluice.jobs import NewJob
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.waits import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.system]

# One worker serves about 1000 cost units/s (1 ms per padded token, batches of 8).
CONFIG = {
    "models": {
        "m": {
            "handler": "synthetic",
            "params": {"base_ms": 1, "per_token_ms": 1.0},
            "buckets": [128],
            "batching": {"max_batch": 8, "max_batch_tokens": 1024, "lease_s": 10},
            "autoscaling": {
                "min_replicas": 1,
                "max_replicas": 4,
                "period_s": 0.5,
                "backlog_drain_s": 4,
                "cold_start_s": 1,
                "service_rate_cost_per_s": 1000,
                "scale_down_window_s": 3,
                "metrics_window_s": 4,
                "p99_wait_slo_ms": 2000,
            },
        }
    },
    "worker": {"heartbeat_s": 0.3, "heartbeat_ttl_s": 3},
}


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "sluice.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


@pytest.fixture
def running(
    config_path: Path, redis_url: str, tmp_path: Path
) -> Iterator[tuple[Autoscaler, LocalBackend, QueueClient]]:
    cfg = load_config(config_path)
    client = QueueClient(connect(redis_url), dict(cfg.models))
    backend = LocalBackend(cfg, config_path, redis_url, log_dir=tmp_path / "logs")
    loop = Autoscaler(PolicySource(config_path, cfg), Observer(client, dict(cfg.models)), backend)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop, 0.1), daemon=True)
    thread.start()
    yield loop, backend, client
    stop.set()
    thread.join(30)
    assert not thread.is_alive()
    assert all(w.proc.poll() is not None for st in backend.models.values() for w in st.workers)


def _ready(client: QueueClient) -> int:
    from sluice import registry

    live, _ = client.run(registry.list_workers_call("m"))
    return sum(1 for w in live if w.state == "ready")


def test_burst_scales_up_drains_and_scales_back_without_losing_jobs(
    running: tuple[Autoscaler, LocalBackend, QueueClient],
) -> None:
    loop, backend, client = running
    wait_until(lambda: _ready(client) == 1, 45, "the min_replicas worker to be ready", every_s=0.1)
    # The burst: 200 jobs x 100 units = 20 s of one worker's time.
    subs = client.submit("m", [NewJob(input=i, bucket="128", cost=100) for i in range(200)])
    ids = [s.id for s in subs]
    wait_until(lambda: backend.current("m") >= 3, 20, "a scale-up to at least 3", every_s=0.1)
    wait_until(lambda: _ready(client) >= 3, 45, "3 ready workers", every_s=0.1)
    wait_until(
        lambda: client.stats("m").counters.get("succeeded", 0) == 200,
        60,
        "the queue to drain",
        every_s=0.1,
    )
    # Idle now: after the 3 s window the extra workers are drained, one per period.
    wait_until(
        lambda: (
            backend.current("m") == 1
            and not any(w.draining_since for w in backend.models["m"].workers)
        ),
        60,
        "a scale-down to 1",
        every_s=0.1,
    )
    st = client.stats("m")
    assert st.queued == 0 and st.in_flight == 0 and st.counters.get("failed", 0) == 0
    assert all(client.get(i).status == "succeeded" for i in ids)  # no job lost
    exits = backend.models["m"].exits
    colds = backend.models["m"].cold_starts  # spawn to ready, one per worker that got ready
    assert len(exits) == len(colds) - 1 >= 2  # all but one drained
    assert all(0 < c < 45 for c in colds.values()) and backend.cold_start_s("m") is not None
    assert all(code == 0 and drained for _, code, drained in exits)  # drained, never killed
    assert loop.last["m"].desired == 1  # settled: no flap back up after the burst


def test_a_crashed_worker_is_restarted(
    running: tuple[Autoscaler, LocalBackend, QueueClient],
) -> None:
    _, backend, client = running
    wait_until(lambda: _ready(client) == 1, 45, "the first worker", every_s=0.1)
    first = backend.models["m"].workers[0]
    os.kill(first.proc.pid, signal.SIGKILL)
    wait_until(
        lambda: any(w.id != first.id for w in backend.models["m"].workers),
        20,
        "a replacement worker",
        every_s=0.1,
    )
    assert backend.models["m"].exits[0][0] == first.id
    assert backend.models["m"].exits[0][2] is False  # a crash, not a drain
    assert backend.current("m") == 1


def test_autoscaler_cli_dry_run_starts_and_stops_on_sigterm(
    config_path: Path, redis_url: str
) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sluice",
            "autoscaler",
            "--config",
            str(config_path),
            "--backend",
            "dry-run",
            "--redis-url",
            redis_url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    # SIGTERM once it has decided at least once: proof it started, however slow the machine.
    wait_until(
        lambda: any('"event": "autoscaler_decision"' in line for line in lines),
        45,
        "the autoscaler's first decision",
    )
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)
    reader.join(20)
    if proc.stdout is not None:  # the pipe is ours to close (a ResourceWarning otherwise)
        proc.stdout.close()
    out = "".join(lines)
    assert proc.returncode == 0, out
    assert "dry-run backend" in out
