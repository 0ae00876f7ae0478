"""The processes of ``sluice bench e2e`` (and ``sluice bench cold-start``): a served
system started and stopped (``sluice up`` or the micro-batcher), its readiness and
worker counts read over HTTP, and the CPU and memory of its process tree per role."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from sluice.cores import THREADS_ENV
from sluice.local.redis_server import free_port
from sluicebench.ready import wait_ready

MODEL = "minilm"


def role_of(cmdline: list[str]) -> str:
    text = " ".join(cmdline)
    if "redis-server" in text:
        return "redis"
    if "microbatcher" in text:
        return "microbatcher"
    for role in ("bulk", "gateway", "worker", "autoscaler"):
        if f" {role}" in text:
            return role
    if " up" in text:
        return "sluice up"
    return "other"


@dataclass
class Procs:
    """CPU seconds per process of a tree, read at the start and end of a phase."""

    root: int
    start: dict[int, tuple[str, float]] = field(default_factory=dict)

    def _read(self) -> dict[int, tuple[str, float, int]]:
        out: dict[int, tuple[str, float, int]] = {}
        try:
            root = psutil.Process(self.root)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return out
        for p in procs:
            try:
                t = p.cpu_times()
                out[p.pid] = (role_of(p.cmdline()), t.user + t.system, p.memory_info().rss)
            except psutil.Error:
                continue
        return out

    def mark(self) -> None:
        self.start = {pid: (role, cpu) for pid, (role, cpu, _) in self._read().items()}

    def since_mark(self, wall_s: float) -> dict[str, Any]:
        """Per role: processes, CPU as % of one core over the phase, RSS now (MiB)."""
        roles: dict[str, dict[str, Any]] = {}
        for pid, (role, cpu, rss) in self._read().items():
            r = roles.setdefault(role, {"procs": 0, "cpu_pct": 0.0, "rss_mib": 0.0})
            r["procs"] += 1
            r["cpu_pct"] += (cpu - self.start.get(pid, (role, 0.0))[1]) / wall_s * 100
            r["rss_mib"] += rss / 2**20
        for r in roles.values():
            r["cpu_pct"], r["rss_mib"] = round(r["cpu_pct"], 1), round(r["rss_mib"], 1)
        return roles


def _wait_http(url: str, ok: Callable[[httpx.Response], bool], timeout_s: float, what: str) -> None:
    if not wait_ready(url, timeout_s, ok, every_s=0.5):
        raise RuntimeError(f"{what} did not come up in {timeout_s:.0f} s")


def _workers(resp: httpx.Response) -> dict[str, int]:
    for m in resp.json().get("data", []):
        if m["name"] == MODEL:
            return {k: int(v) for k, v in m["workers"].items()}
    return {}


def _ready_workers(resp: httpx.Response) -> int:
    return _workers(resp).get("ready", 0)


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start_up(config: Path, log_dir: Path, name: str) -> Served:
    """``sluice up --config CONFIG`` on a free port, with at least one ready MiniLM worker."""
    port = free_port()
    log = log_dir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sluice", "up", "--config", str(config), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=os.environ | {"HF_HUB_OFFLINE": "1"},
            start_new_session=True,
        )
    served = Served(proc, f"http://127.0.0.1:{port}", log)
    try:
        _wait_http(f"{served.url}/v1/models", lambda r: _ready_workers(r) > 0, 240, name)
    except BaseException:
        served.stop()
        raise
    return served


def start_microbatcher(threads: int, log_dir: Path) -> Served:
    port = free_port()
    log = log_dir / "microbatcher.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sluicebench.microbatcher", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=os.environ | {"HF_HUB_OFFLINE": "1", THREADS_ENV: str(threads)},
            start_new_session=True,
        )
    served = Served(proc, f"http://127.0.0.1:{port}", log)
    try:
        _wait_http(f"{served.url}/healthz", lambda r: r.status_code == 200, 240, "microbatcher")
    except BaseException:
        served.stop()
        raise
    return served


def workers_now(served: Served) -> dict[str, int]:
    try:
        return _workers(httpx.get(f"{served.url}/v1/models", timeout=5))
    except httpx.HTTPError:
        return {}
