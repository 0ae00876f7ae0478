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
    info: dict[str, WorkerInfo] = field(default_factory=dict)  # latest heartbeats by id
    cold_starts: dict[str, float] = field(default_factory=dict)  # id -> spawn-to-ready s


def sluice_command() -> list[str]:
    exe = shutil.which("sluice", path=str(Path(sys.executable).parent)) or shutil.which("sluice")
    return [exe] if exe else [sys.executable, "-m", "sluice"]
