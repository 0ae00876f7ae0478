"""``sluice up``: Redis, a gateway and the autoscaler (with its workers) on one machine.

Each component runs as its own process, as in production; this module only
starts them in order, shows a live status line, and on Ctrl-C or SIGTERM stops
them in reverse order (the autoscaler drains its workers first) and makes sure
no descendant process is left behind.
"""

from __future__ import annotations

import base64
import os
import secrets
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from sluice.config import REDIS_URL_ENV, SluiceConfig
from sluice.errors import RedisUnavailable, SluiceError
from sluice.local.children import Child, Children
from sluice.local.redis_server import RedisServer, free_port, start_redis
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.registry import list_workers_call


@dataclass(frozen=True)
class StackUrls:
    gateway: str
    redis: str  # may carry a password: print it through sluice.redact.redact_url
    logs: Path
    admin: str = ""  # the admin listener (/metrics, /dashboard) when gateway.admin_port is set
    webhook_secret: str = ""  # where the secret webhooks are signed with is, when generated
    # /metrics of the processes the gateway's page does not cover: (name, URL) each
    metrics: tuple[tuple[str, str], ...] = ()


class Stack:
    """The processes of one ``sluice up``; ``stop()`` is safe to call more than once."""

    def __init__(self, cfg: SluiceConfig, config_path: Path, log_dir: Path | None = None) -> None:
        self.cfg, self.config_path = cfg, config_path
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="sluice-up-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.children = Children(self.log_dir)
        self.redis_server: RedisServer | None = None
        self.redis_url = ""
        self._stopped = threading.Event()

    def start(
        self, redis_url: str | None, host: str, port: int, data_dir: Path | None
    ) -> StackUrls:
        if redis_url:
            self.redis_url = redis_url
        else:
            self.redis_server = start_redis(data_dir=data_dir)
            self.redis_url = self.redis_server.url
        # The Redis URL may hold a password: children get it in their environment,
        # never on a command line (which any local user can read with `ps`).
        self.children.env = dict(os.environ, **{REDIS_URL_ENV: self.redis_url})
        secret_file = self._webhook_secret()
        common = ["--config", str(self.config_path)]
        self.children.spawn("gateway", ["gateway", *common, "--host", host, "--port", str(port)])
        metrics = self._metrics_ports()
        port_of = dict(metrics)
        self.children.spawn(
            "notifier", ["notifier", *common, "--metrics-port", str(port_of["notifier"])]
        )
        self.children.spawn("autoscaler", ["autoscaler", *common, "--backend", "local"])
        for i in range(self.cfg.bulk.rq_workers):  # RQ workers for bulk coordinators
            name = f"bulk-worker-{i}"
            port_arg = ["--metrics-port", str(port_of[name])]
            self.children.spawn(name, ["bulk", "worker", *common, *port_arg])
        gateway = f"http://{host}:{port}"
        gw = self.cfg.gateway
        admin = f"http://{gw.admin_host}:{gw.admin_port}" if gw.admin_port else ""
        self._wait_ready(gateway)
        self._wait_workers()
        urls = tuple((n, f"http://127.0.0.1:{p}/metrics") for n, p in metrics)
        return StackUrls(gateway, self.redis_url, self.log_dir, admin, secret_file, urls)

    def _metrics_ports(self) -> list[tuple[str, int]]:
        """A /metrics port for the notifier and each RQ bulk worker: the configured one
        (the first bulk worker's), else a free one, so a stack is observable unasked."""
        ports = [("notifier", self.cfg.webhooks.metrics_port or free_port())]
        for i in range(self.cfg.bulk.rq_workers):
            configured = self.cfg.bulk.metrics_port if i == 0 else 0
            ports.append((f"bulk-worker-{i}", configured or free_port()))
        return ports

    def _webhook_secret(self) -> str:
        """With no webhook secret configured, one made for this stack (in its children's
        environment and a 0600 file in the log directory, never printed), so webhooks
        work out of the box; returns that file's path ('' when one was configured)."""
        wh, env = self.cfg.webhooks, self.children.env
        if env is None or wh.secret_file or not wh.secret_env or env.get(wh.secret_env):
            return ""
        secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
        path = self.log_dir / "webhook-secret"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret + "\n")
        env[wh.secret_env] = secret
        return str(path)

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
                self.children.check_alive()
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
        self.children.wait_http(f"{gateway}/readyz", timeout_s, "gateway")

    def dead_child(self) -> Child | None:
        return self.children.dead()

    def stop(self, drain_timeout_s: float = 60.0) -> list[int]:
        """Stop everything; returns pids that had to be killed (none, when all drained)."""
        if self._stopped.is_set():
            return []
        self._stopped.set()
        seen = self.children.descendants()  # workers too: they must not outlive us
        killed: list[int] = []
        for child in list(reversed(self.children.all)):  # the autoscaler first: it drains workers
            if child.name.startswith("bulk-worker") and child.alive():
                # stop() sends a second signal: RQ's cold shutdown, so the coordinator
                # slice in hand stops now instead of running out its slice_s. That is
                # safe: it checkpoints as it goes, and the next start resumes it.
                child.proc.send_signal(signal.SIGTERM)
                time.sleep(0.2)
            killed += self.children.stop([child], drain_timeout_s)
        gone, alive = psutil.wait_procs(seen, timeout=5)
        for p in alive:
            p.kill()
            killed.append(p.pid)
        if self.redis_server is not None:
            self.redis_server.stop()
        return killed
