"""What the control loop needs from a backend, and the dry-run one."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from sluice.config import WarmPoolConfig
from sluice.registry import WorkerInfo

# Sends one control command to one worker: (model, worker id, command), e.g. promote.
Control = Callable[[str, str, str], None]

log = logging.getLogger("sluice.autoscaler")


class Backend(Protocol):
    """Everything the loop calls, in the order a period calls it: ``tick`` once, then
    per model ``observe``, ``current``, ``cold_start_s``, ``keep_pool`` and, when the
    decision differs from ``current``, ``scale``; ``close`` on the way out."""

    name: str

    def observe(self, model: str, workers: list[WorkerInfo]) -> None:
        """The live workers (from heartbeats) of the latest good read, before
        ``current`` is asked; a backend that counts on its own may ignore them."""
        ...

    def current(self, model: str) -> int:
        """Replicas running or starting (draining ones excluded)."""
        ...

    def cold_start_s(self, model: str) -> float | None:
        """Spawn-to-ready time this backend measured, or None to use the workers'
        own (``ready_at - started_at``) or the policy's estimate."""
        ...

    def scale(self, model: str, desired: int, workers: list[WorkerInfo]) -> None:
        """Move toward ``desired``; ``workers`` (live, from heartbeats) say who is idle.
        Parked workers of a warm pool are promoted before any is started."""
        ...

    def keep_pool(self, model: str, pool: WarmPoolConfig) -> None:
        """Every period, before ``scale``: the model's warm-pool settings (they reload);
        refill the pool or trim it to ``pool.size``. A backend without pools ignores it."""
        ...

    def pool_room(self, model: str) -> int | None:
        """How many parked workers the cores or devices free now could promote, or None
        where this backend knows no such bound (``warm_pool.size: auto``, ADR 0156)."""
        ...

    def tick(self, now_s: float) -> None:
        """Housekeeping between decisions (reap exits, restart crashes)."""
        ...

    def close(self) -> None: ...


def idlest_first(workers: list[WorkerInfo]) -> list[WorkerInfo]:
    """Drain order: starting (no work yet), then idle ready, then busy; within a
    group, the one that has done the least (nothing warm to lose) first."""
    rank = {"starting": 0, "standby": 0, "ready": 1, "quarantined": 0}

    def key(w: WorkerInfo) -> tuple[int, int, int]:
        return (rank.get(w.state, 3), 1 if w.busy else 0, w.jobs)

    return sorted((w for w in workers if w.state != "draining"), key=key)


class DryRunBackend:
    """Decides and logs only; ``current`` is what the heartbeats show running."""

    name = "dry-run"

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def observe(self, model: str, workers: list[WorkerInfo]) -> None:
        serving = [w for w in workers if w.state in ("starting", "ready") and not w.parked]
        self._seen[model] = len(serving)

    def current(self, model: str) -> int:
        return self._seen.get(model, 0)

    def cold_start_s(self, model: str) -> float | None:
        return None

    def scale(self, model: str, desired: int, workers: list[WorkerInfo]) -> None:
        log.info("dry-run: would scale %s from %d to %d", model, self.current(model), desired)

    def keep_pool(self, model: str, pool: WarmPoolConfig) -> None:
        return None

    def pool_room(self, model: str) -> int | None:
        return None

    def tick(self, now_s: float) -> None:
        return None

    def close(self) -> None:
        return None
