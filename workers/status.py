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
            self._derive()
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
            self._derive()

    def release(self, job_ids: list[str]) -> None:
        with self._lock:
            self._held.difference_update(job_ids)
            self._derive()

    def held(self) -> list[str]:
        with self._lock:
            return sorted(self._held)

    def _derive(self) -> None:
        # busy means "holds leased jobs", running or prefetched: the autoscaler never
        # kills a busy worker after a drain timeout, and a prefetched lease is as much
        # a job in hand as a running one. Called with the lock held.
        n = len(self._held)
        if self.info.busy != (n > 0) or self.info.extra.get("held") != n:
            self.info = replace(self.info, busy=n > 0, extra={**self.info.extra, "held": n})
