"""A real Sluice stack as child processes: private Redis, a gateway, N workers.

For the stack benchmarks and the load generator's end-to-end test. Every
process is started through the product's own child-process group
(sluice.local.children, the one ``sluice up`` uses), on loopback, and everything
started here is stopped here (``close``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis

from sluice import keys
from sluice.config import load_config
from sluice.errors import SluiceError
from sluice.local.children import Child, Children
from sluice.local.redis_server import RedisServer, free_port, start_redis


@dataclass
class Stack:
    """Start with :meth:`start`; add workers per model; :meth:`close` stops all."""

    config_path: Path
    log_dir: Path
    gateway_workers: int = 1
    worker_args: list[str] = field(default_factory=list)
    redis: RedisServer | None = None
    url: str = ""
    children: Children = field(init=False)

    def __post_init__(self) -> None:
        self.children = Children(self.log_dir)

    @property
    def procs(self) -> list[Child]:
        """Every process started here and not yet stopped, in start order."""
        return self.children.all

    def start(self, timeout_s: float = 30.0) -> Stack:
        self.redis = start_redis()
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.spawn(
            "gateway", ["gateway", "--port", str(port), "--workers", str(self.gateway_workers)]
        )
        self.children.wait_http(f"{self.url}/readyz", timeout_s)
        return self

    def spawn(self, role: str, args: list[str]) -> Child:
        """Start ``sluice ARGS --config ... --redis-url ...``; :meth:`close` stops it."""
        assert self.redis is not None
        name = role.replace(":", "-") + f"-{len(self.procs)}"
        common = ["--config", str(self.config_path), "--redis-url", self.redis.url]
        return self.children.spawn(name, [*args, *common], role=role)

    def add_workers(
        self, model: str, n: int, timeout_s: float = 60.0, extra_args: tuple[str, ...] = ()
    ) -> None:
        """Start n more workers of model and wait until all of its workers are ready."""
        args = ["worker", "--model", model, "--metrics-port", "-1", "--log-level", "WARNING"]
        for _ in range(n):
            self.spawn(f"worker:{model}", [*args, *self.worker_args, *extra_args])
        want = len(self.workers(model))
        deadline = time.monotonic() + timeout_s
        while self.ready_workers(model) < want:
            self.children.check_alive()
            if time.monotonic() > deadline:
                raise SluiceError(f"{model}: {want} workers not ready within {timeout_s}s")
            time.sleep(0.1)
        # The gateway admits on a snapshot refreshed every stats_refresh_s: until it
        # has seen a ready worker it answers 503 for a model that does not scale from 0.
        time.sleep(load_config(self.config_path).gateway.stats_refresh_s * 1.2 + 0.1)

    def add_autoscaler(self, backend: str = "dry-run") -> None:
        """Start ``sluice autoscaler`` (dry-run: it observes, reclaims and decides but
        starts no worker, so the workers stay the ones this stack started)."""
        self.spawn(
            "autoscaler",
            ["autoscaler", "--backend", backend, "--metrics-port", "0", "--log-level", "WARNING"],
        )

    def workers(self, model: str) -> list[Child]:
        return [p for p in self.procs if p.role == f"worker:{model}" and p.alive()]

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
        self.children.stop(self.workers(model), timeout_s)

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds so far per role (gateway includes its uvicorn children), and Redis."""
        out: dict[str, float] = {}
        for p in self.procs:
            role = p.role.split(":")[0]
            out[role] = out.get(role, 0.0) + _tree_cpu(p.proc.pid)
        if self.redis is not None and self.redis.proc is not None:
            out["redis"] = _tree_cpu(self.redis.proc.pid)
        return out

    def close(self) -> None:
        self.children.stop(self.procs, 15.0)
        if self.redis is not None:
            self.redis.stop()
            self.redis = None

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tree_cpu(pid: int) -> float:
    total = 0.0
    try:
        ps = psutil.Process(pid)
        for proc in [ps, *ps.children(recursive=True)]:
            t = proc.cpu_times()
            total += t.user + t.system
    except psutil.Error:
        pass  # exited between the listing and the read: its time is lost, not fatal
    return total
