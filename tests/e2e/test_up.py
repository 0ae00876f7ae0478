"""End to end through the CLI: ``sluice up`` with real processes.

One stack for the module: results in every bucket (the real MiniLM model and
the synthetic one), a burst that scales the synthetic model up while a worker is
killed with SIGKILL (every job still finishes, once), then Ctrl-C leaves no
process behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from sluice.client import Client
from sluice.config import load_config
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.redis_server import free_port
from sluice.registry import list_workers_call

pytestmark = [pytest.mark.slow]

CONFIG = {
    "models": {
        "minilm": {
            "handler": "embedding", "buckets": [32, 128, 512], "cost": {"method": "tokenizer"},
            "batching": {"max_batch": 16, "max_batch_tokens": 4096, "lease_s": 30},
            "autoscaling": {"min_replicas": 1, "max_replicas": 1, "cold_start_s": 20},
        },
        "synthetic": {
            "handler": "synthetic", "params": {"base_ms": 2, "per_token_ms": 0.5},
            "buckets": [32, 128, 512], "cost": {"method": "words"},
            # Short leases so a killed worker's jobs come back within a second or two.
            "batching": {"max_batch": 8, "max_batch_tokens": 4096, "lease_s": 1.5},
            "autoscaling": {
                "min_replicas": 1, "max_replicas": 4, "period_s": 0.5, "backlog_drain_s": 3,
                "cold_start_s": 1, "scale_down_window_s": 5, "metrics_window_s": 4,
                "p99_wait_slo_ms": 1000,
            },
        },
    },
    "worker": {"heartbeat_s": 0.3, "heartbeat_ttl_s": 3},
    "autoscaler": {"drain_timeout_s": 20},
}  # fmt: skip


def wait_for(cond: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@dataclass
class Up:
    proc: subprocess.Popen[str]
    gateway: str
    redis_url: str
    config_path: Path

    def queue(self) -> QueueClient:
        return QueueClient(connect(self.redis_url), dict(load_config(self.config_path).models))

    def workers(self, model: str):  # type: ignore[no-untyped-def]
        return self.queue().run(list_workers_call(model, time.time()))[0]

    def ready(self, model: str) -> int:
        return sum(1 for w in self.workers(model) if w.state == "ready")


def gateway_sees_ready(gateway: str) -> bool:
    models = httpx.get(f"{gateway}/v1/models", timeout=5).json()["models"]
    return all(m["workers"]["ready"] >= 1 for m in models)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    path = tmp_path_factory.mktemp("up") / "sluice.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sluice", "up", "--config", str(path), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=os.environ | {"HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    lines = []
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        assert line, "sluice up exited before it was up:\n" + "".join(lines)
        lines.append(line)
        if line.strip().startswith("redis "):
            redis_url = line.split()[1]
        if line.startswith("Ctrl-C"):
            break
    stack = Up(proc, f"http://127.0.0.1:{port}", redis_url, path)
    # `sluice up` prints its banner only once the warm models have a ready worker.
    assert stack.ready("minilm") and stack.ready("synthetic")
    assert gateway_sees_ready(stack.gateway)
    yield stack
    if proc.poll() is None:  # a test failed before the Ctrl-C test stopped it
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_banner_gives_a_curl_that_works(up: Up) -> None:
    r = httpx.post(
        f"{up.gateway}/v1/models/minilm/predict", json={"input": "Sluice is up"}, timeout=60
    )
    assert r.status_code == 200
    assert len(r.json()["result"]["embedding"]) == 384


@pytest.mark.parametrize(
    ("model", "words", "bucket"),
    [("minilm", 4, "32"), ("minilm", 60, "128"), ("minilm", 250, "512"),
     ("synthetic", 5, "32"), ("synthetic", 100, "128"), ("synthetic", 400, "512")],
)  # fmt: skip
def test_result_in_every_bucket(up: Up, model: str, words: int, bucket: str) -> None:
    text = " ".join(["word"] * words)
    with Client(up.gateway) as c:
        job = c.predict(model, text)
    assert job["status"] == "succeeded" and job["bucket"] == bucket
    if model == "minilm":
        vec = job["result"]["embedding"]
        assert len(vec) == 384 and abs(sum(v * v for v in vec) - 1.0) < 1e-3
    else:
        assert job["result"] == {"tokens": words}


def test_burst_scales_up_and_survives_a_killed_worker(up: Up) -> None:
    sizes = [20 + (i * 37) % 90 for i in range(300)]  # 20..109 words: buckets 32 and 128
    with Client(up.gateway) as c:
        jobs = []
        for start in range(0, len(sizes), 50):
            chunk = [" ".join(["w"] * n) for n in sizes[start : start + 50]]
            jobs += c.submit_many("synthetic", chunk)
        assert len({j["id"] for j in jobs}) == len(sizes)
        wait_for(lambda: up.ready("synthetic") >= 2, 60, "the autoscaler to add workers")
        wait_for(lambda: any(w.busy for w in up.workers("synthetic")), 10, "a busy worker")
        victim = next(w for w in up.workers("synthetic") if w.busy)
        os.kill(victim.pid, signal.SIGKILL)
        finished = [c.result(j["id"], timeout_s=120) for j in jobs]
    # Every job finished exactly once as the client sees it, with its own result.
    assert [f["id"] for f in finished] == [j["id"] for j in jobs]
    assert all(f["status"] == "succeeded" for f in finished)
    assert [f["result"]["tokens"] for f in finished] == sizes
    # The killed worker's leased jobs were redelivered and ran again elsewhere.
    assert any(f["attempts"] >= 2 for f in finished)
    stats = up.queue().stats("synthetic")
    assert stats.queued == 0 and stats.dead_lettered == 0


def sluice(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sluice", *args], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_submit_and_status_commands(up: Up) -> None:
    out = sluice("submit", "synthetic", "a b c", "d e", "--url", up.gateway, "--json-out")
    assert out.returncode == 0, out.stderr
    jobs = json.loads(out.stdout)
    assert [j["result"] for j in jobs] == [{"tokens": 3}, {"tokens": 2}]
    table = sluice("submit", "synthetic", "x y", "--url", up.gateway)
    assert table.returncode == 0 and "succeeded" in table.stdout
    missing = sluice("submit", "nosuch", "x", "--url", up.gateway)
    assert missing.returncode == 1 and "404" in missing.stderr
    status = sluice("status", "--config", str(up.config_path), "--redis-url", up.redis_url)
    assert status.returncode == 0, status.stderr
    assert "synthetic" in status.stdout and "ready" in status.stdout
    one = sluice("status", jobs[0]["id"], "--config", str(up.config_path),
                 "--redis-url", up.redis_url)  # fmt: skip
    assert one.returncode == 0 and "succeeded" in one.stdout


def test_ctrl_c_drains_and_leaves_no_process(up: Up) -> None:
    tree = psutil.Process(up.proc.pid).children(recursive=True)
    assert len(tree) >= 4  # redis, gateway, autoscaler and its workers
    up.proc.send_signal(signal.SIGINT)
    assert up.proc.wait(90) == 0
    gone, alive = psutil.wait_procs(tree, timeout=10)
    assert not alive, f"left behind: {[p.pid for p in alive]}"
