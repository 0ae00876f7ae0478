"""A real ``sluice up`` for end-to-end tests: start it, read its banner, stop it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sluice.config import load_config
from sluice.local.redis_server import free_port
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.registry import list_workers_call

# The repository's root: on the children's PYTHONPATH, so a worker can load a test
# handler (``tests.kit.<module>:<Class>``) whatever the directory pytest ran from.
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Up:
    proc: subprocess.Popen[str]
    gateway: str
    redis_url: str
    config_path: Path
    printed: list[str] = field(default_factory=list)  # what it printed until its banner
    _models: dict[str, Any] | None = field(default=None, repr=False)

    def models(self) -> dict[str, Any]:
        """The config's models, read once: tests poll ``ready`` every 10 ms, and
        parsing the file was a third of a look's ~7 ms of CPU."""
        if self._models is None:
            self._models = dict(load_config(self.config_path).models)
        return self._models

    @contextmanager
    def queue(self) -> Iterator[QueueClient]:
        """A queue client on the stack's Redis, closed on leaving: a socket left for
        the collector fails the suite at exit (filterwarnings = error)."""
        qc = QueueClient(connect(self.redis_url), dict(self.models()))
        try:
            yield qc
        finally:
            qc.redis.close()

    def workers(self, model: str):  # type: ignore[no-untyped-def]
        with self.queue() as qc:  # one look each
            return qc.run(list_workers_call(model))[0]

    def ready(self, model: str) -> int:
        return sum(1 for w in self.workers(model) if w.state == "ready")


def launch(config: dict[str, Any], directory: Path, env: dict[str, str] | None = None) -> Up:
    """``sluice up`` on a free port; returns once it has printed its banner.
    ``env``: more environment (SLUICE_REDIS_URL: run on that Redis, start none)."""
    path = directory / "sluice.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sluice", "up", "--config", str(path), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"HF_HUB_OFFLINE": "1", "PYTHONPATH": _pythonpath()} | (env or {}),
    )
    lines: list[str] = []
    assert proc.stdout is not None
    redis_url = ""
    while True:
        line = proc.stdout.readline()
        assert line, "sluice up exited before it was up:\n" + "".join(lines)
        lines.append(line)
        if line.strip().startswith("redis "):
            redis_url = line.split()[1]
        if line.startswith("Ctrl-C"):
            break
    return Up(proc, f"http://127.0.0.1:{port}", redis_url, path, lines)


def _pythonpath() -> str:
    """The repository's root first, then whatever PYTHONPATH the test run has."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def shut_down(up: Up) -> None:
    """Ctrl-C, if a test has not stopped it already."""
    if up.proc.poll() is None:
        up.proc.send_signal(signal.SIGINT)
        try:
            up.proc.wait(60)
        except subprocess.TimeoutExpired:
            up.proc.kill()
            up.proc.wait()
    if up.proc.stdout is not None:
        up.proc.stdout.close()
