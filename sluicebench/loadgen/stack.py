"""A real Sluice stack as child processes: private Redis, a gateway, N workers.

For the stack benchmarks and the load generator's end-to-end test. Every
process is started through the ``sluice`` CLI exactly as a user would, on
loopback, and everything started here is stopped here (``close``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx
import psutil
import redis

from sluice import keys
from sluice.config import load_config
from sluice.errors import SluiceError
from sluice.redis_server import RedisServer, free_port, start_redis


@dataclass
class _Proc:
    role: str  # "gateway" or "worker:<model>"
    popen: subprocess.Popen[bytes]
    ps: psutil.Process
    log: IO[bytes]


@dataclass
class Stack:
    """Start with :meth:`start`; add workers per model; :meth:`close` stops all."""

    config_path: Path
    log_dir: Path
    gateway_workers: int = 1
    worker_args: list[str] = field(default_factory=list)
    redis: RedisServer | None = None
    url: str = ""
    procs: list[_Proc] = field(default_factory=list)

    def start(self, timeout_s: float = 30.0) -> Stack:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.redis = start_redis()
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self._spawn(
            "gateway", ["gateway", "--port", str(port), "--workers", str(self.gateway_workers)]
        )
        _wait_http(f"{self.url}/readyz", timeout_s, self.procs[-1])
        return self

    def _spawn(self, role: str, args: list[str]) -> _Proc:
        assert self.redis is not None
        name = role.replace(":", "-") + f"-{len(self.procs)}"
        log = (self.log_dir / f"{name}.log").open("wb")
        cmd = [
            sys.executable,
            "-m",
            "sluice",
            *args,
            "--config",
            str(self.config_path),
            "--redis-url",
            self.redis.url,
        ]
        popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        proc = _Proc(role, popen, psutil.Process(popen.pid), log)
        self.procs.append(proc)
        return proc

    def add_workers(
        self, model: str, n: int, timeout_s: float = 60.0, extra_args: tuple[str, ...] = ()
    ) -> None:
        """Start n more workers of model and wait until all of its workers are ready."""
        args = ["worker", "--model", model, "--metrics-port", "-1", "--log-level", "WARNING"]
        for _ in range(n):
            self._spawn(f"worker:{model}", [*args, *self.worker_args, *extra_args])
        want = len(self.workers(model))
        deadline = time.monotonic() + timeout_s
        while self.ready_workers(model) < want:
            for p in self.workers(model):
                if p.popen.poll() is not None:
                    raise _exited(p)
            if time.monotonic() > deadline:
                raise SluiceError(f"{model}: {want} workers not ready within {timeout_s}s")
            time.sleep(0.1)
        # The gateway admits on a snapshot refreshed every stats_refresh_s: until it
        # has seen a ready worker it answers 503 for a model that does not scale from 0.
        time.sleep(load_config(self.config_path).gateway.stats_refresh_s * 1.2 + 0.1)

    def add_autoscaler(self, backend: str = "dry-run") -> None:
        """Start ``sluice autoscaler`` (dry-run: it observes, reclaims and decides but
        starts no worker, so the workers stay the ones this stack started)."""
        self._spawn(
            "autoscaler",
            ["autoscaler", "--backend", backend, "--metrics-port", "0", "--log-level", "WARNING"],
        )

    def workers(self, model: str) -> list[_Proc]:
        return [p for p in self.procs if p.role == f"worker:{model}" and p.popen.poll() is None]

    def ready_workers(self, model: str) -> int:
        assert self.redis is not None
        client = redis.Redis.from_url(self.redis.url, decode_responses=True)
        try:
            infos = client.hgetall(keys.workers_info_key(model))
        finally:
            client.close()
        return sum(1 for raw in infos.values() if json.loads(raw).get("state") == "ready")

    def stop_workers(self, model: str, timeout_s: float = 20.0) -> None:
        """SIGTERM (drain) every worker of model and wait for them to exit."""
        procs = self.workers(model)
        for p in procs:
            p.popen.send_signal(signal.SIGTERM)
        _reap(procs, timeout_s)
        self.procs = [p for p in self.procs if p not in procs]

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds so far per role (gateway includes its uvicorn children), and Redis."""
        out: dict[str, float] = {}
        for p in self.procs:
            role = p.role.split(":")[0]
            out[role] = out.get(role, 0.0) + _tree_cpu(p.ps)
        if self.redis is not None and self.redis.proc is not None:
            out["redis"] = _tree_cpu(psutil.Process(self.redis.proc.pid))
        return out

    def close(self) -> None:
        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.send_signal(signal.SIGTERM)
        _reap(self.procs, 15.0)
        self.procs = []
        if self.redis is not None:
            self.redis.stop()
            self.redis = None

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _exited(p: _Proc) -> SluiceError:
    return SluiceError(f"a {p.role} process exited with {p.popen.returncode}; see {p.log.name}")


def _tree_cpu(ps: psutil.Process) -> float:
    total = 0.0
    try:
        for proc in [ps, *ps.children(recursive=True)]:
            t = proc.cpu_times()
            total += t.user + t.system
    except psutil.Error:
        pass  # exited between the listing and the read: its time is lost, not fatal
    return total


def _reap(procs: list[_Proc], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.popen.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            # Kill what we started, children first (uvicorn workers are the gateway's).
            try:
                children = p.ps.children(recursive=True)
            except psutil.Error:
                children = []
            for child in children:
                child.kill()
            p.popen.kill()
            p.popen.wait()
        p.log.close()


def _wait_http(url: str, timeout_s: float, proc: _Proc) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise _exited(proc)
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SluiceError(f"{url} not ready within {timeout_s}s")
