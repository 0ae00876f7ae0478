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
    # Held jobs whose outcomes are on their way to Redis: the completion may have
    # ended them there already (its WAIT for a replica still out), so a renewal that
    # finds them gone has not lost them; the completion's reply says what became of them.
    _ending: set[str] = field(default_factory=set)
    # Held jobs that ended under this worker (cancelled, past their deadline or
    # limits.max_run_ms; the renewal says so): stop computing them, send nothing.
    _stopped: set[str] = field(default_factory=set)
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
            self._ending.difference_update(job_ids)
            self._stopped.difference_update(job_ids)
            self._derive()

    def ending(self, job_ids: list[str]) -> None:
        """Their outcomes are about to be sent: still held until ``release``."""
        with self._lock:
            self._ending.update(j for j in job_ids if j in self._held)

    def lost_of(self, missing: list[str]) -> list[str]:
        """Of the ids a renewal found without this worker's lease, those truly lost:
        still held and not being completed by this worker. Called after the renewal's
        reply, so a completion that ended them first is seen (ending, or released)."""
        with self._lock:
            return [j for j in missing if j in self._held and j not in self._ending]

    def stop(self, job_ids: list[str]) -> list[str]:
        """Mark held jobs that ended elsewhere (the renewal's news) as stopped; the
        ones newly stopped. A job whose outcome is on its way is left alone."""
        with self._lock:
            new = [j for j in job_ids if j in self._held and j not in self._ending]
            new = [j for j in new if j not in self._stopped]
            self._stopped.update(new)
            return new

    def stopped(self, job_ids: list[str]) -> set[str]:
        """Which of ``job_ids`` are stopped."""
        with self._lock:
            return self._stopped.intersection(job_ids)

    def all_stopped(self, job_ids: list[str]) -> bool:
        """Every one of ``job_ids`` stopped (a batch with nothing left worth computing)."""
        with self._lock:
            return bool(job_ids) and self._stopped.issuperset(job_ids)

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
