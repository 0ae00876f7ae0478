"""Replicated and clustered Redis on loopback, from one redis-server binary.

``SentinelGroup``: a primary, N replicas and M sentinels watching them (what
``sluice redis --replicas N --sentinels M`` runs, so failover can be tried on one
machine). ``LocalCluster``: N primaries with ``cluster-enabled yes`` and the 16384
slots split between them. Both stop every process they started on exit; the
servers keep nothing on disk. Tests and benchmarks kill nodes with ``kill``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import redis
from redis.crc import key_slot

from sluice.errors import SluiceError
from sluice.local.redis_server import RedisServer, die_with_parent, find_redis_server, free_port

SERVICE_NAME = "sluice"
SLOTS = 16384
# The sentinels' settings (docs/reliability.md, "The Redis primary lost"). With
# down-after-milliseconds 1000 a sentinel called the just-promoted primary down
# 1.0 s after the switch (one slow PING on a busy host) and failed over again, to
# the old primary restarted empty: 648 of 1,035 acknowledged jobs lost. A primary
# must be silent this long before it is called down; Redis's default is 30000.
DOWN_AFTER_MS = 5000
# Sentinel resets a primary's failover state once a failover ends, so this does not
# stop a second failover; it bounds how long one may take to reconfigure replicas
# and how soon a failed attempt is retried (twice this). Redis's default is 180000.
FAILOVER_TIMEOUT_MS = 60000


def failover_timeout_ms(down_after_ms: int) -> int:
    """The failover-timeout for a down-after-milliseconds: well above it."""
    return max(FAILOVER_TIMEOUT_MS, 12 * down_after_ms)


def _wait(what: str, ok: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if ok() if callable(ok) else ok:
                return
        except (redis.exceptions.RedisError, OSError):
            pass
        time.sleep(0.05)
    raise SluiceError(f"{what}: not ready within {timeout_s:.0f}s")


class SentinelProcess:
    """One ``redis-server --sentinel`` watching ``service`` at ``primary``."""

    def __init__(
        self,
        binary: str,
        primary: tuple[str, int],
        service: str,
        quorum: int,
        *,
        down_after_ms: int,
        password: str | None = None,
    ) -> None:
        self.binary, self.primary, self.service = binary, primary, service
        self.quorum, self.down_after_ms, self.password = quorum, down_after_ms, password
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="sluice-sentinel-")

    def _conf(self) -> Path:
        host, port = self.primary
        lines = [
            f"port {self.port}",
            "bind 127.0.0.1",
            f"dir {self._tmp.name}",
            f"logfile {self._tmp.name}/sentinel.log",
            f"sentinel monitor {self.service} {host} {port} {self.quorum}",
            f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}",
            f"sentinel failover-timeout {self.service} {failover_timeout_ms(self.down_after_ms)}",
            f"sentinel parallel-syncs {self.service} 1",
        ]
        if self.password:
            quoted = self.password.replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'sentinel auth-pass {self.service} "{quoted}"')
        conf = Path(self._tmp.name) / "sentinel.conf"
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        return conf

    def start(self) -> SentinelProcess:
        self.proc = subprocess.Popen(
            [self.binary, str(self._conf()), "--sentinel"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5, decode_responses=True)
        try:
            _wait(f"sentinel on port {self.port}", client.ping, 10.0)
        finally:
            client.close()
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._tmp.cleanup()


class SentinelGroup:
    """A primary, ``replicas`` replicas and ``sentinels`` sentinels on loopback.

    ``url`` is the ``redis+sentinel://`` URL that every Sluice process takes.
    ``down_after_ms`` is how long the primary must be silent before the sentinels
    call it down (DOWN_AFTER_MS: a shorter one fails over faster, and also away
    from a new primary that was merely slow). A killed server comes back with
    :meth:`rejoin`, as a replica of the current primary.
    """

    def __init__(
        self,
        replicas: int = 1,
        sentinels: int = 3,
        *,
        service: str = SERVICE_NAME,
        down_after_ms: int = DOWN_AFTER_MS,
        password: str | None = None,
        binary: str | None = None,
        upstream: Callable[[int], int] | None = None,
    ) -> None:
        if replicas < 1 or sentinels < 1:
            raise SluiceError("a Sentinel group needs at least 1 replica and 1 sentinel")
        self.binary = binary or find_redis_server()
        self.service, self.password = service, password
        self.down_after_ms = down_after_ms
        self.n_replicas, self.n_sentinels = replicas, sentinels
        # The port replicas replicate from, given the primary's (a benchmark's
        # lagging link); the primary's own by default.
        self.upstream = upstream or (lambda port: port)
        self.servers: list[RedisServer] = []
        self.sentinels: list[SentinelProcess] = []

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{auth}{hosts}/{self.service}/0"

    def start(self, timeout_s: float = 30.0) -> SentinelGroup:
        try:
            primary = RedisServer(binary=self.binary, password=self.password).start()
            self.servers.append(primary)
            for _ in range(self.n_replicas):
                replicaof = ["--replicaof", "127.0.0.1", str(self.upstream(primary.port))]
                self.servers.append(
                    RedisServer(
                        binary=self.binary, password=self.password, extra_args=replicaof
                    ).start()
                )
            quorum = self.n_sentinels // 2 + 1
            for _ in range(self.n_sentinels):
                self.sentinels.append(
                    SentinelProcess(
                        self.binary,
                        ("127.0.0.1", primary.port),
                        self.service,
                        quorum,
                        down_after_ms=self.down_after_ms,
                        password=self.password,
                    ).start()
                )
            self.wait_settled(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _sentinel(self, s: SentinelProcess) -> redis.Redis:
        return redis.Redis(port=s.port, socket_timeout=1, decode_responses=True)

    def primary_port(self) -> int:
        """The port the sentinels now name as primary (after a failover, a former replica)."""
        for s in self.sentinels:
            if s.proc is None or s.proc.poll() is not None:
                continue
            c = self._sentinel(s)
            try:
                addr: Any = c.sentinel_get_master_addr_by_name(self.service)
                return int(addr[1])
            except (redis.exceptions.RedisError, OSError, TypeError):
                continue
            finally:
                c.close()
        raise SluiceError("no sentinel names a primary")

    def primary(self) -> RedisServer:
        port = self.primary_port()
        return next(s for s in self.servers if s.port == port)

    def wait_settled(self, timeout_s: float = 30.0) -> None:
        """Until every sentinel sees the primary, its live replicas and the other
        sentinels: only then can they agree on a failover."""
        live = sum(1 for s in self.servers if s.proc and s.proc.poll() is None) - 1

        def settled() -> bool:
            for s in self.sentinels:
                c = self._sentinel(s)
                try:
                    m: Any = c.sentinel_master(self.service)
                finally:
                    c.close()
                if (
                    int(m["num-slaves"]) < live
                    or int(m["num-other-sentinels"]) < len(self.sentinels) - 1
                ):
                    return False
                if "s_down" in m["flags"] or "o_down" in m["flags"]:
                    return False
            return True

        _wait("sentinel group", settled, timeout_s)
        self._wait_replicas_ack(live, timeout_s)

    def _wait_replicas_ack(self, n: int, timeout_s: float) -> None:
        """Until ``n`` replicas have loaded the primary's data and ack writes (online
        is the RDB sent, not loaded): WAIT on a write of a key Sluice never reads."""
        c = redis.Redis(
            port=self.primary_port(), password=self.password, socket_timeout=timeout_s + 1
        )
        try:
            c.set("sluice-topology:probe", 1)
            c.delete("sluice-topology:probe")
            acked = int(c.execute_command("WAIT", n, int(timeout_s * 1000)))
        finally:
            c.close()
        if acked < n:
            raise SluiceError(f"sentinel group: {acked} of {n} replicas acked within {timeout_s}s")

    def rejoin(self, server: RedisServer) -> RedisServer:
        """Restart a stopped or killed ``server`` on its port as a replica of the
        current primary. Restarted as a primary it would hold nothing, and until the
        sentinels demote it (seconds) a second failover could pick it."""
        if server.proc is not None and server.proc.poll() is None:
            raise SluiceError(f"redis-server on port {server.port} is still running")
        server.stop()  # reaps it, removes its temporary directory
        replicaof = ["--replicaof", "127.0.0.1", str(self.upstream(self.primary_port()))]
        fresh = RedisServer(
            port=server.port, binary=self.binary, password=self.password, extra_args=replicaof
        ).start()
        self.servers[self.servers.index(server)] = fresh
        return fresh

    def stop(self) -> None:
        for s in self.sentinels:
            s.stop()
        for srv in self.servers:
            srv.stop()

    def __enter__(self) -> SentinelGroup:
        return self.start() if not self.servers else self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free and in range too."""
    import socket

    for _ in range(200):
        port = free_port()
        if port > 55535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise SluiceError("no free port pair for a cluster node")


class LocalCluster:
    """``shards`` primaries in cluster mode, the slots split evenly between them."""

    def __init__(
        self, shards: int = 3, *, binary: str | None = None, node_timeout_ms: int = 2000
    ) -> None:
        if shards < 1:
            raise SluiceError("a cluster needs at least 1 shard")
        self.binary = binary or find_redis_server()
        self.n, self.node_timeout_ms = shards, node_timeout_ms
        self.nodes: list[RedisServer] = []

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def _node_args(self, port: int) -> list[str]:
        return [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            f"nodes-{port}.conf",
            "--cluster-node-timeout",
            str(self.node_timeout_ms),
        ]

    def start(self, timeout_s: float = 30.0) -> LocalCluster:
        try:
            for _ in range(self.n):
                port = _cluster_port()
                self.nodes.append(
                    RedisServer(
                        port=port, binary=self.binary, extra_args=self._node_args(port)
                    ).start()
                )
            self._assign_slots()
            self._meet()
            self.wait_ok(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def client(self, node: RedisServer) -> redis.Redis:
        return redis.Redis(port=node.port, socket_timeout=5, decode_responses=True)

    def owner(self, slot: int) -> RedisServer:
        """The node that serves ``slot`` now (asks the first live node)."""
        for node in self.nodes:
            if node.proc is None or node.proc.poll() is not None:
                continue
            c = self.client(node)
            try:
                for lo, hi, primary, *_ in c.execute_command("CLUSTER SLOTS"):
                    if int(lo) <= slot <= int(hi):
                        port = int(primary[1])
                        return next(n for n in self.nodes if n.port == port)
            finally:
                c.close()
        raise SluiceError(f"no node serves slot {slot}")

    def node_id(self, node: RedisServer) -> str:
        c = self.client(node)
        try:
            return str(c.execute_command("CLUSTER MYID"))
        finally:
            c.close()

    def migrate_slot(
        self, slot: int, to: RedisServer, batch: int = 10, pause_s: float = 0.0
    ) -> int:
        """Move ``slot`` to ``to`` while clients keep using it, as ``redis-cli --cluster
        reshard`` does: mark it importing and migrating, MIGRATE its keys ``batch`` at
        a time (clients meanwhile get ASK and TRYAGAIN), then give it to ``to`` on
        every node. Returns how many keys moved."""
        src = self.owner(slot)
        if src.port == to.port:
            return 0
        src_id, dst_id = self.node_id(src), self.node_id(to)
        s, d = self.client(src), self.client(to)
        moved = 0
        try:
            d.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
            s.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
            while True:
                keys = s.execute_command("CLUSTER GETKEYSINSLOT", slot, batch)
                if not keys:
                    break
                s.execute_command("MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS", *keys)
                moved += len(keys)
                time.sleep(pause_s)  # a slower move: clients see the slot split for longer
            for node in [to, src, *(n for n in self.nodes if n.port not in (src.port, to.port))]:
                c = self.client(node)
                try:
                    c.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
                finally:
                    c.close()
        finally:
            s.close()
            d.close()
        return moved

    def models_on_every_shard(self, prefix: str = "m") -> list[str]:
        """One model name per shard (by the slot of its hash tag), in node order."""
        per = SLOTS // self.n
        found: dict[int, str] = {}
        for i in range(10_000):
            name = f"{prefix}{i}"
            shard = min(key_slot(name.encode()) // per, self.n - 1)
            found.setdefault(shard, name)
            if len(found) == self.n:
                return [found[s] for s in range(self.n)]
        raise SluiceError("no model names found for every shard")

    def _assign_slots(self) -> None:
        per = SLOTS // self.n
        for i, node in enumerate(self.nodes):
            lo = i * per
            hi = SLOTS - 1 if i == self.n - 1 else lo + per - 1
            c = self.client(node)
            try:
                # ADDSLOTS (Redis 6.2 has no ADDSLOTSRANGE), in chunks.
                for start in range(lo, hi + 1, 1000):
                    c.execute_command("CLUSTER ADDSLOTS", *range(start, min(hi, start + 999) + 1))
            finally:
                c.close()

    def _meet(self) -> None:
        first = self.client(self.nodes[0])
        try:
            for node in self.nodes[1:]:
                first.execute_command("CLUSTER MEET", "127.0.0.1", node.port)
        finally:
            first.close()

    def wait_ok(self, timeout_s: float = 30.0) -> None:
        def ok() -> bool:
            for node in self.nodes:
                c = self.client(node)
                try:
                    info = c.execute_command("CLUSTER INFO")
                finally:
                    c.close()
                if info["cluster_state"] != "ok" or int(info["cluster_known_nodes"]) != self.n:
                    return False
            return True

        _wait("redis cluster", ok, timeout_s)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> LocalCluster:
        return self.start() if not self.nodes else self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
