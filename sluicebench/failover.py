"""A Sentinel failover under load, on real processes: what a client sees and what is lost.

A primary, replicas and three sentinels (:class:`SentinelGroup`), ``sluice gateway``
and ``sluice worker`` processes on the ``redis+sentinel://`` URL, and a client
submitting steadily, each job with its own Idempotency-Key: a 503 (or a dropped
connection) is retried with the same key, as a client should. Mid-load the primary
is killed with SIGKILL; nothing is restarted but the dead Redis, which comes back
as a replica once a new primary is up (what a supervisor does). Then every job
that got a 202 is looked up: finished with its own result, or lost.

The replica replicates through :class:`LagLink`; with ``lag_s`` it stops
receiving the primary's stream that long before the kill, as over a slow or
partitioned link (on loopback alone a replica is never behind).

``tests/*/ha`` asserts on it (``durability: replica`` loses nothing) and
``sluice bench failover`` reports it for both settings.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from sluice.config import parse_config
from sluice.errors import JobNotFound, RedisUnavailable
from sluice.local.redis_server import RedisServer, free_port
from sluice.local.redis_topology import SentinelGroup
from sluice.queue import QueueClient
from sluice.queue.client import connect
from workers.handlers.synthetic import unit_vector

MODEL = "m"
DIM = 4  # the synthetic handler's result is a vector derived from the job's input


def failover_config(durability: str) -> dict[str, Any]:
    return {
        "models": {
            MODEL: {
                "handler": "synthetic",
                "params": {"base_ms": 5, "per_token_ms": 0, "embedding_dim": DIM},
                "buckets": [32, 128],
                "batching": {"max_batch": 8, "lease_s": 3},
                "queue": {"durability": durability, "replica_ack_timeout_ms": 500},
                "autoscaling": {"period_s": 0.5, "min_replicas": 0},
            }
        },
        # Observes and decides through the failover; dry-run: the workers are ours.
        "autoscaler": {"backend": "dry-run", "metrics_port": 0},
        "worker": {"heartbeat_s": 0.3, "heartbeat_ttl_s": 3, "metrics_port": 0},
        "gateway": {"redis_timeout_s": 1.0, "stats_refresh_s": 0.3},
    }


@dataclass
class Outcome:
    """One run: what the client saw, and what became of every job it was promised."""

    durability: str
    lag_s: float = 0.0  # how far behind the replica was when the primary died
    accepted: dict[str, str] = field(default_factory=dict)  # Idempotency-Key -> job id
    statuses: Counter[int] = field(default_factory=Counter)  # every non-202 answer (0: no answer)
    id_changed: list[str] = field(default_factory=list)  # a key answered with two ids
    lost: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)  # finished with another job's result
    killed_at: float = 0.0
    first_202_after_s: float | None = None
    first_done_after_s: float | None = None
    failover_s: float | None = None  # until the sentinels named a new primary
    crashed: list[str] = field(default_factory=list)  # processes that exited
    long_polls: Counter[int] = field(default_factory=Counter)  # answers to ?wait=5
    decisions_after_kill: int = 0  # the autoscaler's decisions logged after the kill

    def summary(self) -> dict[str, Any]:
        return {
            "durability": self.durability,
            "replica_lag_s": self.lag_s,
            "accepted": len(self.accepted),
            "lost": len(self.lost),
            "wrong_result": len(self.wrong),
            "id_changed": len(self.id_changed),
            "non_202": dict(sorted(self.statuses.items())),
            "failover_s": _r(self.failover_s),
            "kill_to_first_202_s": _r(self.first_202_after_s),
            "kill_to_first_completed_s": _r(self.first_done_after_s),
            "crashed": self.crashed,
            "long_poll_answers": dict(sorted(self.long_polls.items())),
            "autoscaler_decisions_after_kill": self.decisions_after_kill,
        }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


class Client(threading.Thread):
    """Submits one job every ``every_s``, retrying each with its key until a 202."""

    def __init__(self, url: str, out: Outcome, every_s: float) -> None:
        super().__init__(daemon=True, name="failover-client")
        self.url, self.out, self.every_s = url, out, every_s
        self.stop = threading.Event()
        self.accepted_at: list[tuple[float, float]] = []  # (sent, answered) of each 202

    def run(self) -> None:
        with httpx.Client(timeout=5) as c:
            i = 0
            while not self.stop.is_set():
                i += 1
                self._one(c, f"k{i}", f"job {i} " + "w " * (i % 20))
                time.sleep(self.every_s)

    def _one(self, c: httpx.Client, key: str, text: str) -> None:
        while not self.stop.is_set():
            sent_at = time.monotonic()
            try:
                resp = c.post(
                    f"{self.url}/v1/models/{MODEL}/jobs",
                    json={"input": text},
                    headers={"Idempotency-Key": key},
                )
            except httpx.HTTPError:
                self.out.statuses[0] += 1
                time.sleep(0.1)
                continue
            if resp.status_code == 202:
                job_id = resp.json()["id"]
                if self.out.accepted.get(key, job_id) != job_id:
                    self.out.id_changed.append(key)
                self.out.accepted[key] = job_id
                self.accepted_at.append((sent_at, time.monotonic()))
                return
            self.out.statuses[resp.status_code] += 1
            time.sleep(min(1.0, float(resp.headers.get("Retry-After", "0.2"))))


class Poller(threading.Thread):
    """Long-polls accepted jobs (``?wait=5``) through the failover, as clients that
    wait for their results do: every answer is 200 (ended), or 503 to retry."""

    def __init__(self, url: str, out: Outcome) -> None:
        super().__init__(daemon=True, name="failover-poller")
        self.url, self.out = url, out
        self.stop = threading.Event()
        self.answers: Counter[int] = Counter()

    def run(self) -> None:
        seen = 0
        with httpx.Client(timeout=15) as c:
            while not self.stop.is_set():
                ids = list(self.out.accepted.values())
                if len(ids) <= seen:
                    time.sleep(0.02)
                    continue
                job_id, seen = ids[-1], len(ids)
                try:
                    resp = c.get(f"{self.url}/v1/jobs/{job_id}", params={"wait": 5})
                    self.answers[resp.status_code] += 1
                except httpx.HTTPError:
                    self.answers[0] += 1


class LagLink:
    """The replication link from the primary to its replica, through us: ``hold``
    stops forwarding the primary's stream (the replica falls behind, as over a slow
    or partitioned network), ``drop`` cuts the link and discards what was held
    (lost with the primary). Loopback alone never lags: the kernel hands every
    byte to the replica's socket at once, so a killed primary loses nothing there."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target = 0
        self.flowing = threading.Event()
        self.flowing.set()
        self.dropped = threading.Event()
        self.lock = threading.Lock()
        self.socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="lag-link").start()

    def to(self, primary_port: int) -> int:
        self.target = primary_port
        return self.port

    def hold(self) -> None:
        self.flowing.clear()

    def drop(self) -> None:
        self.dropped.set()
        self.flowing.set()
        with self.lock:
            socks, self.socks = [*self.socks, self.listener], []
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while not self.dropped.is_set():
            try:
                replica, _ = self.listener.accept()
            except OSError:
                return
            try:
                primary = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                replica.close()
                continue
            with self.lock:
                if self.dropped.is_set():
                    replica.close()
                    primary.close()
                    return
                self.socks += [replica, primary]
            for src, dst, gated in ((primary, replica, True), (replica, primary, False)):
                threading.Thread(target=self._pump, args=(src, dst, gated), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, gated: bool) -> None:
        with contextlib.suppress(OSError):
            while True:
                if gated:
                    self.flowing.wait()
                data = src.recv(65536)
                if not data or self.dropped.is_set():
                    break
                dst.sendall(data)
        self.drop_pair(src, dst)

    def drop_pair(self, *pair: socket.socket) -> None:
        """One side closed: close both (the replica reconnects if it wants)."""
        with self.lock:
            self.socks = [s for s in self.socks if s not in pair]
        for s in pair:
            with contextlib.suppress(OSError):
                s.close()


class Procs:
    def __init__(self, workdir: Path, url: str, cfg: dict[str, Any]) -> None:
        self.workdir, self.url = workdir, url
        self.cfg_path = workdir / "sluice.yaml"
        self.cfg_path.write_text(yaml.safe_dump(cfg))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, *args: str) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        cmd = [sys.executable, "-m", "sluice", *args, "-c", str(self.cfg_path)]
        env = {**os.environ, "SLUICE_REDIS_URL": self.url}
        self.procs[name] = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        log.close()

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    def dead(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is not None]

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _until(cond: Any, timeout_s: float, what: str, every_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(every_s)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def _ready(client: httpx.Client, url: str, workers: int) -> bool:
    try:
        models = client.get(f"{url}/v1/models", timeout=2).json()["data"]
        return sum(m["workers"]["ready"] for m in models if m["name"] == MODEL) >= workers
    except (httpx.HTTPError, ValueError, KeyError):
        return False


def run_failover(
    durability: str,
    workdir: Path,
    *,
    replicas: int = 1,
    before_s: float = 3.0,
    after_jobs: int = 100,
    every_s: float = 0.01,
    workers: int = 2,
    timeout_s: float = 90.0,
    lag_s: float = 0.0,
) -> Outcome:
    """One failover under load; returns what happened (asserts nothing). ``lag_s``:
    the replica stops receiving the primary's writes this long before the kill."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = Outcome(durability, lag_s=lag_s)
    link = LagLink()
    group = SentinelGroup(
        replicas=replicas, sentinels=3, down_after_ms=1000, upstream=link.to
    ).start()
    procs = Procs(workdir, group.url, failover_config(durability))
    client: Client | None = None
    revived: RedisServer | None = None
    try:
        gw = _spawn_stack(procs, workers, timeout_s)
        client = Client(gw, out, every_s)
        client.start()
        poller = Poller(gw, out)
        poller.start()
        time.sleep(before_s)  # steady load: submits, claims and completions in flight
        decided = procs.log("autoscaler").count("autoscaler_decision")
        old = _kill_primary(group, link, out, timeout_s)
        # The dead server comes back as a replica of the new primary (a supervisor's
        # restart), so "replica" durability has a replica again.
        revived = _revive_as_replica(group, old)
        base = len(out.accepted)
        _until(lambda: len(out.accepted) >= base + after_jobs, timeout_s, "submits after it")
        _stop_load(client, poller, out)
        _settle(out, group.url, timeout_s)
        out.decisions_after_kill = procs.log("autoscaler").count("autoscaler_decision") - decided
        out.crashed = procs.dead()
    finally:
        if client is not None:
            client.stop.set()
        procs.stop()
        if revived is not None:
            revived.stop()
        link.drop()
        group.stop()
    return out


def _spawn_stack(procs: Procs, workers: int, timeout_s: float) -> str:
    """A gateway, ``workers`` workers and an autoscaler; the gateway's URL once the
    workers are ready (or a process died: the caller's Outcome records that)."""
    port = free_port()
    gw = f"http://127.0.0.1:{port}"
    procs.spawn("gateway", "gateway", "--port", str(port))
    for i in range(workers):
        procs.spawn(f"worker{i}", "worker", "-m", MODEL, "--metrics-port", "-1")
    procs.spawn("autoscaler", "autoscaler")
    # One client for every look: httpx.get built a TLS context per call (~50 ms of
    # CPU), 20 times a second while the stack starts.
    with httpx.Client() as client:
        _until(lambda: _ready(client, gw, workers) or procs.dead(), timeout_s, "the stack")
    return gw


def _kill_primary(
    group: SentinelGroup, link: LagLink, out: Outcome, timeout_s: float
) -> RedisServer:
    """Kill the primary (the replica cut off ``out.lag_s`` before); return it once
    the sentinels have promoted another. Records the kill time and the failover's."""
    old = group.primary()
    assert old.proc is not None
    if out.lag_s:
        link.hold()
        time.sleep(out.lag_s)
    old.proc.kill()
    out.killed_at = time.monotonic()
    link.drop()
    _until(lambda: _new_primary(group, old.port), timeout_s, "a new primary")
    out.failover_s = time.monotonic() - out.killed_at
    return old


def _stop_load(client: Client, poller: Poller, out: Outcome) -> None:
    client.stop.set()
    client.join(10)
    poller.stop.set()
    poller.join(20)
    out.long_polls = poller.answers
    out.first_202_after_s = _first_after(client.accepted_at, out.killed_at)


def _new_primary(group: SentinelGroup, old_port: int) -> bool:
    try:
        return group.primary_port() != old_port
    except Exception:  # noqa: BLE001 - sentinels mid-election
        return False


def _revive_as_replica(group: SentinelGroup, old: RedisServer) -> RedisServer:
    old.stop()
    new_port = group.primary_port()
    revived = RedisServer(
        port=old.port, binary=group.binary, extra_args=["--replicaof", "127.0.0.1", str(new_port)]
    ).start()
    group.servers[group.servers.index(old)] = revived
    return revived


def _first_after(times: list[tuple[float, float]], t0: float) -> float | None:
    """Seconds from ``t0`` to the first 202 of a submit sent after it."""
    later = [answered - t0 for sent, answered in times if sent > t0]
    return min(later) if later else None


def _settle(out: Outcome, url: str, timeout_s: float) -> None:
    """Wait for every accepted job to end; then sort them into done, lost, wrong."""
    q = QueueClient(connect(url), dict(parse_config(failover_config(out.durability)).models))
    inputs = {key: key for key in out.accepted}
    pending = dict(out.accepted)
    deadline = time.monotonic() + timeout_s
    done_at: list[float] = []
    try:
        while pending and time.monotonic() < deadline:
            for key, job_id in list(pending.items()):
                try:
                    rec = q.get(job_id, MODEL)
                except JobNotFound:
                    out.lost.append(job_id)
                    del pending[key]
                    continue
                except RedisUnavailable:
                    break
                if rec.status.value in ("succeeded", "failed", "expired", "cancelled"):
                    del pending[key]
                    done_at.append((rec.finished_at_ms or 0) / 1000)
                    _check(out, key, job_id, rec, inputs)
            time.sleep(0.1)
        out.lost += list(pending.values())  # never finished
        first = q.redis.time()
        now_s = int(first[0]) + int(first[1]) / 1e6
        # Server clock: how long ago each finished, turned into "after the kill".
        ago = time.monotonic() - out.killed_at
        after = [d - (now_s - ago) for d in done_at if d and d > now_s - ago]
        out.first_done_after_s = min(after) if after else None
    finally:
        q.redis.close()


def _check(out: Outcome, key: str, job_id: str, rec: Any, inputs: dict[str, str]) -> None:
    n = int(key[1:])
    text = f"job {n} " + "w " * (n % 20)
    if rec.status.value != "succeeded" or rec.result != {"embedding": unit_vector(text, DIM)}:
        out.wrong.append(job_id)
