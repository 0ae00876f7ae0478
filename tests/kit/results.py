"""Watching jobs the way a client does: long-polls through the gateway, every result
each read returned, so a test can assert that no job ever showed two results."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import httpx

from sluice.client import Client

TERMINAL = ("succeeded", "failed", "expired", "cancelled")


@dataclass
class Watcher:
    """Threads that read every job over and over (long-polls until it ends, plain
    reads after) and record each distinct result seen per job id."""

    url: str
    ids: list[str]
    threads: int = 4
    seen: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    status: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    reads: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _pool: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Watcher:
        for i in range(self.threads):
            share = self.ids[i :: self.threads]
            t = threading.Thread(target=self._watch, args=(share,), daemon=True)
            t.start()
            self._pool.append(t)
        return self

    def _watch(self, share: list[str]) -> None:
        with Client(self.url, timeout_s=10, max_retries=50) as c:
            while not self._stop.is_set():
                for job_id in share:
                    ended = self.status.get(job_id) in TERMINAL
                    try:  # the client's own retries ride out a restarting gateway
                        job = c.get(job_id, wait_s=None if ended else 1.0)
                    except (httpx.HTTPError, Exception) as e:  # noqa: BLE001 - recorded
                        self.errors.append(f"{job_id}: {type(e).__name__}: {e}")
                        time.sleep(0.1)
                        continue
                    with self._lock:
                        self.reads += 1
                        self.status[job_id] = job["status"]
                        if job["status"] == "succeeded":
                            self.seen[job_id].add(repr(job["result"]))
                    if self._stop.is_set():
                        return

    def ended(self) -> int:
        return sum(1 for s in self.status.values() if s in TERMINAL)

    def stop(self) -> None:
        self._stop.set()
        for t in self._pool:
            t.join(15)
