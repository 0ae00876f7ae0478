"""Real processes for fault tests: a private redis-server per test, and ``sluice
gateway`` / ``sluice worker`` started through the CLI by ``sluice.local.children``
(as ``sluice up`` starts them), each logging to a file.

Every wait has a deadline; teardown kills (after SIGCONT) every process a test
started, by its own pid.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from sluice.config import SluiceConfig, parse_config
from sluice.local.children import Child, Children
from sluice.local.redis_server import RedisServer, free_port
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.kit.http import HTTP
from tests.waits import wait_until

MODEL = "m"
STAMPED = "tests.kit.stack_handlers:StampedHandler"
BROKEN = "tests.kit.stack_handlers:BrokenHandler"


def fault_config(
    handler: str = STAMPED,
    *,
    params: dict[str, Any] | None = None,
    batching: dict[str, Any] | None = None,
    worker: dict[str, Any] | None = None,
    gateway: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One synthetic-like model ``m``; short leases and heartbeats so faults show fast."""
    return {
        "models": {
            MODEL: {
                "handler": handler,
                "params": {"base_ms": 20, "per_token_ms": 0, **(params or {})},
                "buckets": [32, 128, 512],
                "cost": {"method": "words"},
                "batching": {
                    "max_batch": 4,
                    "max_batch_tokens": 4096,
                    "lease_s": 1.5,
                    **(batching or {}),
                },
            }
        },
        "worker": {
            "heartbeat_s": 0.3,
            "heartbeat_ttl_s": 3,
            "quarantine_grace_s": 0.5,
            "metrics_port": 0,
            **(worker or {}),
        },
        "gateway": {"redis_timeout_s": 1.0, "stats_refresh_s": 0.5, **(gateway or {})},
    }


@dataclass
class Redis:
    """A redis-server this test may kill, stop and restart on the same port and data dir."""

    port: int
    data_dir: Path | None
    appendfsync: str = "everysec"
    server: RedisServer | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.server is not None and self.server.proc is not None
        return self.server.proc.pid

    def start(self) -> Redis:
        self.server = RedisServer(
            port=self.port, data_dir=self.data_dir, appendfsync=self.appendfsync
        ).start()
        return self

    def kill9(self) -> None:
        assert self.server is not None and self.server.proc is not None
        self.server.proc.kill()
        self.server.proc.wait(5)
        self.server.stop()  # closes pipes and the temporary dir; the process is gone

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def client(self) -> redis.Redis:
        return connect(self.url, timeout_s=2.0)

    def stop(self) -> None:
        if self.server is not None and self.server.proc is not None:
            if self.server.proc.poll() is None:
                os.kill(self.server.proc.pid, signal.SIGCONT)
            self.server.stop(timeout_s=5)


@dataclass
class Proc:
    child: Child
    args: list[str]  # its ``sluice`` arguments, to start it again

    @property
    def name(self) -> str:
        return self.child.role

    @property
    def popen(self) -> subprocess.Popen[bytes]:
        return self.child.proc

    @property
    def log(self) -> Path:
        return self.child.log_path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.popen.send_signal(sig)

    def freeze(self) -> None:
        """SIGSTOP, and return once the kernel shows the process stopped (state T).

        ``kill`` returns before the target stops when it is running on another core;
        after this returns it cannot send anything more.
        """
        self.signal(signal.SIGSTOP)
        stat = Path(f"/proc/{self.pid}/stat")
        wait_until(
            lambda: stat.read_text().rsplit(")", 1)[1].split()[0] == "T", 10, "stopped", 0.001
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def count(self, needle: str) -> int:
        return sum(1 for line in self.text().splitlines() if needle in line)


@dataclass
class Stack:
    """What one test started; ``spawn_*`` go through the ``sluice`` CLI."""

    tmp: Path
    redis: Redis
    procs: list[Proc] = field(default_factory=list)
    configs: int = 0
    clients: list[QueueClient] = field(default_factory=list)  # closed at teardown
    owns_redis: bool = True  # False: a SharedGateway's, stopped with it, not here
    children: Children = field(init=False)

    def __post_init__(self) -> None:
        self.children = Children(self.tmp)

    def write_config(self, cfg: dict[str, Any]) -> Path:
        self.configs += 1
        path = self.tmp / f"sluice-{self.configs}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    def spawn(self, name: str, args: list[str]) -> Proc:
        """``sluice ARGS``, logging to ``<tmp>/<name>-<n>.log`` (a file, never a pipe:
        a full pipe would block the child)."""
        child = self.children.spawn(f"{name}-{len(self.procs)}", args, role=name)
        proc = Proc(child, args)
        self.procs.append(proc)
        return proc

    def spawn_gateway(self, cfg_path: Path, port: int | None = None) -> tuple[Proc, str]:
        port = port or free_port()
        args = [
            "gateway",
            "-c",
            str(cfg_path),
            "--redis-url",
            self.redis.url,
            "--port",
            str(port),
            "--log-level",
            "info",
        ]
        proc = self.spawn("gateway", args)
        url = f"http://127.0.0.1:{port}"
        wait_until(
            lambda: ready(url) or not proc.alive(), 30, "the gateway to be ready", every_s=0.1
        )
        assert proc.alive(), proc.text()
        return proc, url

    def restart(self, proc: Proc) -> Proc:
        """The same command again (same port, same config)."""
        return self.spawn(proc.name, proc.args)

    def spawn_worker(self, cfg_path: Path, *extra: str, wait_ready: bool = True) -> Proc:
        args = [
            "worker",
            "-c",
            str(cfg_path),
            "-m",
            MODEL,
            "--redis-url",
            self.redis.url,
            "--metrics-port",
            "-1",
            *extra,
        ]
        proc = self.spawn("worker", args)
        if wait_ready:
            wait_until(
                lambda: " ready: " in proc.text() or not proc.alive(),
                30,
                "the worker to be ready",
                every_s=0.1,
            )
            assert proc.alive(), proc.text()
        return proc

    def queue(self, cfg: dict[str, Any]) -> QueueClient:
        """A queue client; teardown closes it (a socket left for the collector at
        pytest's exit fails the suite under filterwarnings = error)."""
        qc = QueueClient(self.redis.client(), dict(parse(cfg).models))
        self.clients.append(qc)
        return qc

    def teardown(self) -> None:
        for qc in self.clients:
            qc.redis.close()
        for p in self.procs:
            if p.alive():
                p.signal(signal.SIGCONT)
                p.popen.kill()
            try:
                p.popen.wait(10)
            except subprocess.TimeoutExpired:
                pass
            p.child.log.close()
        if self.owns_redis:
            self.redis.stop()


@dataclass
class LogSince:
    """What a process logged from a point on (a shared gateway's, during one test)."""

    proc: Proc
    offset: int

    def alive(self) -> bool:
        return self.proc.alive()

    def text(self) -> str:
        return self.proc.log.read_bytes()[self.offset :].decode(errors="replace")

    def count(self, needle: str) -> int:
        return sum(1 for line in self.text().splitlines() if needle in line)


@dataclass
class SharedGateway:
    """A redis-server and a ``sluice gateway`` on it that a module's tests share
    (starting a gateway costs about 2 CPU s): each test gets a Stack on that Redis,
    flushed first, whose own processes (workers) end with the test."""

    stack: Stack
    gateway: Proc
    url: str
    config: Path

    def fresh(self, tmp: Path, aof: str | None | bool = False) -> Stack:
        """A Stack on the shared Redis with nothing in it: no job, counter or worker
        of an earlier test (FLUSHALL; the gateway's subscriptions are not keys).

        ``aof``: False, the Redis as it is; None, no append-only file (a restart
        comes back empty); "always" or "everysec", the append-only file fsynced so.
        Set at run time (CONFIG SET) where it can be; turning the file on takes a
        restart, of the gateway too (so a test sees only its own outages)."""
        assert self.gateway.alive(), self.gateway.text()
        redis_ = self.stack.redis
        if aof and redis_.data_dir is None:
            self.gateway.popen.kill()
            self.gateway.popen.wait(10)
            redis_.kill9()
            redis_.data_dir, redis_.appendfsync = self.stack.tmp / "redis-data", str(aof)
            redis_.start()
            self.gateway, self.url = self.stack.spawn_gateway(self.config)
        r = redis_.client()
        try:
            if aof:
                r.config_set("appendfsync", str(aof))
                redis_.appendfsync = str(aof)
            elif aof is None and redis_.data_dir is not None:
                r.config_set("appendonly", "no")
                redis_.data_dir = None  # a restart starts it without one
            r.flushall()
        finally:
            r.close()
        tmp.mkdir(parents=True, exist_ok=True)
        return Stack(tmp, redis_, owns_redis=False)

    def log_from_now(self) -> LogSince:
        """The gateway's log from here on, once Redis answers it and it has said so
        for every outage it logged (an earlier test's)."""
        gw = self.gateway
        wait_until(
            lambda: (
                ready(self.url)
                # one "answers again" per outage a loop logged, however many
                # "still unavailable" reminders a long one added
                and gw.count("Redis answers again") == gw.count("retrying with backoff")
            ),
            30,
            "the shared gateway to be past earlier outages",
            every_s=0.1,
        )
        return LogSince(gw, gw.log.stat().st_size)


@contextmanager
def fresh_stack(gateway: SharedGateway, tmp: Path) -> Iterator[Stack]:
    """:meth:`SharedGateway.fresh` for one test, torn down after it (its workers
    stopped; the shared Redis and gateway stay)."""
    stack = gateway.fresh(tmp)
    try:
        yield stack
    finally:
        stack.teardown()


@contextmanager
def shared_gateway(
    tmp: Path, cfg: dict[str, Any], aof: str | None = None
) -> Iterator[SharedGateway]:
    """A redis-server (``aof``: its append-only file's fsync, None for none) and a
    gateway serving ``cfg``'s models, stopped on leaving."""
    stack = make_stack(tmp, aof=aof)
    try:
        path = stack.write_config(cfg)
        gateway, url = stack.spawn_gateway(path)
        yield SharedGateway(stack, gateway, url, path)
    finally:
        stack.teardown()


def parse(cfg: dict[str, Any]) -> SluiceConfig:
    return parse_config(cfg)


def ready(url: str) -> bool:
    try:
        return HTTP.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def make_stack(tmp: Path, *, aof: str | None = None) -> Stack:
    tmp.mkdir(parents=True, exist_ok=True)
    data = tmp / "redis-data" if aof else None
    return Stack(tmp, Redis(free_port(), data, aof or "everysec").start())


@pytest.fixture
def stack_factory(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """``stack_factory(aof=None | "always" | "everysec") -> Stack``; all torn down after."""
    made: list[Stack] = []

    def make(aof: str | None = None) -> Stack:
        made.append(make_stack(tmp_path / f"stack{len(made)}", aof=aof))
        return made[-1]

    yield make
    for s in made:
        s.teardown()


def submit(url: str, text: str, timeout_s: float = 5.0) -> httpx.Response:
    return HTTP.post(f"{url}/v1/models/{MODEL}/jobs", json={"input": text}, timeout=timeout_s)


def ready_workers(url: str) -> int:
    """Ready workers of ``m`` as the gateway's snapshot sees them (0 if it cannot say)."""
    try:
        models = HTTP.get(f"{url}/v1/models", timeout=2).json()["data"]
    except (httpx.HTTPError, ValueError, KeyError):
        return 0
    return sum(m["workers"]["ready"] for m in models if m["name"] == MODEL)


def snapshot_ready_workers(metrics_url: str) -> float:
    """Ready workers of ``m`` in the gateway's own snapshot (what submit admits by),
    as its /metrics gauge shows it (0 if it cannot say)."""
    try:
        text = HTTP.get(metrics_url, timeout=2).text
    except httpx.HTTPError:
        return 0
    found = re.search(rf'^sluice_workers{{model="{MODEL}",state="ready"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0


def wait_gateway_sees(
    url: str, n: int = 1, timeout_s: float = 20, metrics_url: str | None = None
) -> None:
    """Wait until the gateway admits jobs for ``n`` ready workers. ``metrics_url``:
    where /metrics is served (the admin port's, when ``gateway.admin_port`` is set)."""
    wait_until(
        lambda: ready_workers(url) >= n,
        timeout_s,
        f"Redis to list {n} ready worker(s)",
        every_s=0.1,
    )
    # Submit checks the gateway's snapshot, refreshed in the background: wait for it.
    metrics = metrics_url or f"{url}/metrics"
    wait_until(
        lambda: snapshot_ready_workers(metrics) >= n,
        timeout_s,
        "the gateway's snapshot",
        every_s=0.1,
    )
