"""``sluice up``: Redis, a gateway and the autoscaler (with its workers) on one machine.

Each component runs as its own process, as in production; this module only
starts them in order, shows a live status line, and on Ctrl-C or SIGTERM stops
them in reverse order (the autoscaler drains its workers first) and makes sure
no descendant process is left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import psutil

from sluice.config import REDIS_URL_ENV, SluiceConfig
from sluice.errors import RedisUnavailable, SluiceError
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.redis_server import RedisServer, die_with_parent, start_redis
from sluice.registry import list_workers_call


def sluice_argv() -> list[str]:
    return [sys.executable, "-m", "sluice"]


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: IO[bytes]

    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass(frozen=True)
class StackUrls:
    gateway: str
    redis: str  # may carry a password: print it through sluice.redact.redact_url
    logs: Path
    admin: str = ""  # the admin listener (/metrics, /dashboard) when gateway.admin_port is set


class Stack:
    """The processes of one ``sluice up``; ``stop()`` is safe to call more than once."""

    def __init__(self, cfg: SluiceConfig, config_path: Path, log_dir: Path | None = None) -> None:
        self.cfg, self.config_path = cfg, config_path
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="sluice-up-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.children: list[Child] = []
        self.redis_server: RedisServer | None = None
        self.redis_url = ""
        self._stopped = threading.Event()

    def _spawn(self, name: str, args: list[str]) -> Child:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        # The Redis URL may hold a password: children get it in their environment,
        # never on a command line (which any local user can read with `ps`).
        env = dict(os.environ, **{REDIS_URL_ENV: self.redis_url})
        proc = subprocess.Popen(
            [*sluice_argv(), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            preexec_fn=die_with_parent,
            env=env,
        )
        child = Child(name, proc, log)
        self.children.append(child)
        return child

    def start(
        self, redis_url: str | None, host: str, port: int, data_dir: Path | None
    ) -> StackUrls:
        if redis_url:
            self.redis_url = redis_url
        else:
            self.redis_server = start_redis(data_dir=data_dir)
            self.redis_url = self.redis_server.url
        common = ["--config", str(self.config_path)]
        self._spawn("gateway", ["gateway", *common, "--host", host, "--port", str(port)])
        self._spawn("autoscaler", ["autoscaler", *common, "--backend", "local"])
        for i in range(self.cfg.bulk.rq_workers):  # RQ workers for bulk coordinators
            self._spawn(f"bulk-worker-{i}", ["bulk", "worker", *common])
        gateway = f"http://{host}:{port}"
        gw = self.cfg.gateway
        admin = f"http://{gw.admin_host}:{gw.admin_port}" if gw.admin_port else ""
        self._wait_ready(gateway)
        self._wait_workers()
        return StackUrls(gateway, self.redis_url, self.log_dir, admin)

    def _ready_workers(self, client: QueueClient, model: str) -> int:
        live, _ = client.run(list_workers_call(model))
        return sum(1 for w in live if w.state == "ready")

    def _wait_workers(self, timeout_s: float = 300.0) -> None:
        """Until every model kept warm (min_replicas >= 1) has a ready worker.

        Read from Redis, not the gateway's /v1/models, which needs an API key when
        keys are configured (and `sluice up` holds only their hashes).
        """
        warm = {m for m, c in self.cfg.models.items() if c.autoscaling.min_replicas >= 1}
        client = QueueClient(connect(self.redis_url), dict(self.cfg.models))
        deadline = time.monotonic() + timeout_s
        try:
            while warm and time.monotonic() < deadline:
                dead = self.dead_child()
                if dead:
                    raise SluiceError(f"{dead.name} exited; see {self.log_dir / dead.name}.log")
                try:
                    if all(self._ready_workers(client, m) >= 1 for m in warm):
                        # The gateway's own snapshot refreshes on this period.
                        time.sleep(self.cfg.gateway.stats_refresh_s)
                        return
                except RedisUnavailable:
                    pass
                time.sleep(0.5)
        finally:
            client.redis.close()
        if warm:
            raise SluiceError(f"workers not ready after {timeout_s:.0f}s; see {self.log_dir}")

    def _wait_ready(self, gateway: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = self.dead_child()
            if dead:
                raise SluiceError(
                    f"{dead.name} exited at start; see {self.log_dir / dead.name}.log"
                )
            try:
                if httpx.get(f"{gateway}/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SluiceError(f"gateway not ready after {timeout_s:.0f}s; see {self.log_dir}")

    def dead_child(self) -> Child | None:
        return next((c for c in self.children if not c.alive()), None)

    def descendants(self) -> list[psutil.Process]:
        found: list[psutil.Process] = []
        for c in self.children:
            try:
                found += psutil.Process(c.proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        return found

    def stop(self, drain_timeout_s: float = 60.0) -> list[int]:
        """Stop everything; returns pids that had to be killed (none, when all drained)."""
        if self._stopped.is_set():
            return []
        self._stopped.set()
        seen = self.descendants()  # workers too: they must not outlive us
        killed: list[int] = []
        for child in reversed(self.children):  # the autoscaler first: it drains workers
            if child.alive():
                child.proc.send_signal(signal.SIGTERM)
                if child.name.startswith("bulk-worker"):
                    # A second signal is RQ's cold shutdown: the coordinator slice in hand
                    # stops now instead of running out its slice_s. That is safe: it
                    # checkpoints as it goes, and the next start resumes it.
                    time.sleep(0.2)
                    child.proc.send_signal(signal.SIGTERM)
                try:
                    child.proc.wait(drain_timeout_s)
                except subprocess.TimeoutExpired:
                    child.proc.kill()
                    child.proc.wait()
                    killed.append(child.proc.pid)
            child.log.close()
        gone, alive = psutil.wait_procs(seen + self.descendants(), timeout=5)
        for p in alive:
            p.kill()
            killed.append(p.pid)
        if self.redis_server is not None:
            self.redis_server.stop()
        return killed
