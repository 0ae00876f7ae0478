"""Child ``sluice`` processes on one machine: start, watch, stop, leave nothing behind.

One group of children per stack: ``sluice up`` (sluice.local.up) and the measurement
package's benchmark stacks (sluicebench.loadgen.stack) both start their
components through it, each as ``python -m sluice ...`` exactly as a user
would, with stdin closed, output in a log file per child, and a SIGTERM from
the kernel if this process dies (even by SIGKILL), so no server or worker
outlives what started it. Stopping is SIGTERM (each component drains on it),
then a deadline, then SIGKILL for the process and everything under it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import psutil

from sluice.errors import SluiceError
from sluice.local.redis_server import die_with_parent


def sluice_argv() -> list[str]:
    return [sys.executable, "-m", "sluice"]


@dataclass
class Child:
    name: str  # unique in its group; names the log file
    role: str  # what it is, shared by its kind (e.g. "worker:m")
    proc: subprocess.Popen[bytes]
    log: IO[bytes]

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def log_path(self) -> Path:
        return Path(self.log.name)

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []


class Children:
    """The ``sluice`` processes one stack started, in start order."""

    def __init__(self, log_dir: Path, env: Mapping[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.env = dict(env) if env is not None else None  # None: this process's
        self.all: list[Child] = []

    def spawn(self, name: str, args: list[str], role: str = "") -> Child:
        """Start ``sluice ARGS``, its stdout and stderr in ``<log_dir>/<name>.log``."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed in stop()
        proc = subprocess.Popen(
            [*sluice_argv(), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            preexec_fn=die_with_parent,
            env=self.env,
        )
        child = Child(name, role or name, proc, log)
        self.all.append(child)
        return child

    def dead(self) -> Child | None:
        """The first child that has exited, if any."""
        return next((c for c in self.all if not c.alive()), None)

    def check_alive(self, when: str = "") -> None:
        """Raise SluiceError naming the first child that exited, and its log."""
        dead = self.dead()
        if dead is not None:
            code = dead.proc.returncode
            raise SluiceError(f"{dead.name} exited{when} with {code}; see {dead.log_path}")

    def descendants(self) -> list[psutil.Process]:
        return [p for c in self.all for p in c.descendants()]

    def wait_http(self, url: str, timeout_s: float, what: str = "") -> None:
        """Until GET ``url`` answers 200; SluiceError if a child exits or time runs out."""
        deadline = time.monotonic() + timeout_s
        # One client for every look: each new one builds a TLS context (some 50 ms
        # of CPU, about all a look costs), ten times a second while children start.
        # A plain http:// URL (a child on this machine) needs no CA bundle read at all.
        plain = url.startswith("http://")
        with httpx.Client(timeout=1.0, verify=not plain) as client:
            while time.monotonic() < deadline:
                self.check_alive(" at start")
                try:
                    if client.get(url).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        raise SluiceError(f"{what or url} not ready after {timeout_s:.0f}s; see {self.log_dir}")

    def stop(self, children: list[Child], timeout_s: float) -> list[int]:
        """SIGTERM ``children`` at once, wait up to ``timeout_s`` in all, kill the rest
        (each with everything under it); close their logs and forget them.

        Returns the pids that had to be killed (none, when all drained in time).
        """
        for c in children:
            if c.alive():
                c.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        killed: list[int] = []
        for c in children:
            try:
                c.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for p in c.descendants():  # uvicorn's workers are the gateway's
                    p.kill()
                    killed.append(p.pid)
                c.proc.kill()
                c.proc.wait()
                killed.append(c.proc.pid)
            c.log.close()
        self.all = [c for c in self.all if c not in children]
        return killed
