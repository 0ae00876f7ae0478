"""The worker's shared, thread-safe status: state, held leases, counters.

The batch loop writes it; the housekeeping thread reads it to publish heartbeats
and renew leases. One lock, held only for copies.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

from sluice.registry import WorkerInfo


@dataclass
class WorkerStatus:
    info: WorkerInfo
    _held: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def update(self, **changes: object) -> WorkerInfo:
        with self._lock:
            self.info = replace(self.info, **changes)  # type: ignore[arg-type]
            return self.info

    def snapshot(self) -> WorkerInfo:
        with self._lock:
            return self.info

    @property
    def state(self) -> str:
        return self.snapshot().state

    def hold(self, job_ids: list[str]) -> None:
        with self._lock:
            self._held.update(job_ids)

    def release(self, job_ids: list[str]) -> None:
        with self._lock:
            self._held.difference_update(job_ids)

    def held(self) -> list[str]:
        with self._lock:
            return sorted(self._held)
