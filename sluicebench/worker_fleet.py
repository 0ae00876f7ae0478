"""``sluice bench worker-fleet``: how many synthetic workers this machine holds.

Spawns N ``sluice worker`` processes of the synthetic handler, and reports the
time until all are ready, their idle CPU and memory, a drain of a queue of
jobs, and that SIGTERM makes every one exit 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from sluice import registry
from sluice.cli_common import write_json
from sluice.config import parse_config
from sluice.cost import CostEstimator
from sluice.jobs import NewJob
from sluice.local.redis_server import start_redis
from sluice.queue import QueueClient
from sluice.queue.client import connect

MODEL = "synthetic"
SLUICE = [sys.executable, "-c", "from sluice.cli import main; main()"]


def _config(base_ms: float, per_token_ms: float) -> dict[str, Any]:
    return {
        "models": {
            MODEL: {
                "handler": "synthetic",
                "params": {"base_ms": base_ms, "per_token_ms": per_token_ms},
                "buckets": [32, 128, 512],
                "cost": {"method": "words"},
                "batching": {"max_batch": 32, "max_batch_tokens": 8192, "lease_s": 10},
            }
        }
    }


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return 0.0


def _wait_ready(qc: QueueClient, n: int, timeout_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        live, _ = qc.run(registry.list_workers_call(MODEL))
        if sum(1 for w in live if w.state == "ready") >= n:
            return time.monotonic() - t0
        time.sleep(0.05)
    raise RuntimeError(f"not all {n} workers were ready within {timeout_s} s")


def _drain_jobs(qc: QueueClient, cfg: Any, jobs: int) -> float:
    est = CostEstimator(cfg.model(MODEL))
    texts = [" ".join(["w"] * (5 + i % 60)) for i in range(jobs)]
    t0 = time.monotonic()
    qc.submit(MODEL, [NewJob(t, e.bucket, e.cost) for t in texts for e in [est.estimate(t)]])
    while qc.stats(MODEL).counters.get("succeeded", 0) < jobs:
        time.sleep(0.02)
    return time.monotonic() - t0


def main(workers: int, jobs: int, idle_s: float, json_path: Path | None) -> None:
    data = _config(base_ms=5, per_token_ms=0.05)
    cfg = parse_config(data)
    server = start_redis()
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fleet.yaml"
        path.write_text(yaml.safe_dump(data))
        try:
            qc = QueueClient(connect(server.url), dict(cfg.models))
            cmd = [
                *SLUICE,
                "worker",
                "-c",
                str(path),
                "-m",
                MODEL,
                "--redis-url",
                server.url,
                "--metrics-port",
                "-1",
                "--log-level",
                "WARNING",
            ]
            procs = [subprocess.Popen(cmd) for _ in range(workers)]
            ready_s = _wait_ready(qc, workers, timeout_s=120)
            cpu0 = [_proc_cpu_s(p.pid) for p in procs]
            time.sleep(idle_s)
            idle_cpu = sum(_proc_cpu_s(p.pid) - c for p, c in zip(procs, cpu0, strict=True))
            rss = [_rss_mb(p.pid) for p in procs]
            drain_s = _drain_jobs(qc, cfg, jobs)
            for p in procs:
                p.send_signal(signal.SIGTERM)
            codes = [p.wait(30) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            server.stop()
    result = {
        "workers": workers,
        "all_ready_s": round(ready_s, 2),
        "idle_cpu_percent_per_worker": round(100 * idle_cpu / idle_s / workers, 2),
        "rss_mb_mean": round(sum(rss) / len(rss), 1),
        "rss_mb_max": round(max(rss), 1),
        "jobs": jobs,
        "drain_s": round(drain_s, 2),
        "exit_codes_all_zero": all(c == 0 for c in codes),
    }
    for key, value in result.items():
        print(f"{key:>30}: {value}")
    write_json(json_path, result)
