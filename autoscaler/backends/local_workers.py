"""What the local backend remembers of each worker process and each model."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from sluice.backoff import Backoff
from sluice.registry import WorkerInfo

EXITS_KEPT = 100  # recent worker exits remembered per model (an autoscaler runs for months)


@dataclass
class LocalWorker:
    id: str
    model: str
    proc: subprocess.Popen[bytes]
    device: str | None
    spawned_at: float
    spawned_wall_s: float = 0.0  # to compare with the heartbeat's ready_at (wall clock)
    log_file: IO[bytes] | None = None
    draining_since: float | None = None
    cores: int = 0  # CPU cores held (given back when it exits)
    parked: bool = False  # in the warm pool: started --parked, or parked on a scale-down
    threads: int = 0  # its torch threads (the cores it takes while serving)
    # A promote or park command to it raised: it may still have reached the worker (a
    # reply lost in a failover), so its heartbeat says whether it serves, until a
    # later command to it succeeds.
    unsure: bool = False


@dataclass
class ModelState:
    workers: list[LocalWorker] = field(default_factory=list)
    restarts_due: list[float] = field(default_factory=list)  # monotonic times
    crashes: int = 0
    exits: deque[tuple[str, int, bool]] = field(  # (id, code, drained), the newest last
        default_factory=lambda: deque(maxlen=EXITS_KEPT)
    )
    # A parked worker's exits: the pool is refilled after a backoff, not every period.
    pool_backoff: Backoff = field(default_factory=Backoff)
    pool_refill_at: float = 0.0  # monotonic; no refill before
    pool_exit_at: float = float("-inf")  # monotonic; the latest parked worker's exit
    info: dict[str, WorkerInfo] = field(default_factory=dict)  # latest heartbeats by id
    cold_starts: dict[str, float] = field(default_factory=dict)  # id -> spawn-to-ready s

    def loaded_since_pool_exit(self, info: WorkerInfo) -> bool:
        """A worker started after the latest parked exit has loaded the model (standby,
        or ready: promoted while loading, or serving). A worker already there says
        nothing of whether replacements load: a healthy standby one must not reset a
        crash loop's backoff (issue 28)."""
        w = next((w for w in self.workers if w.id == info.id), None)
        loaded = info.state in ("standby", "ready")
        return loaded and w is not None and w.spawned_at > self.pool_exit_at


def sluice_command() -> list[str]:
    exe = shutil.which("sluice", path=str(Path(sys.executable).parent)) or shutil.which("sluice")
    return [exe] if exe else [sys.executable, "-m", "sluice"]
