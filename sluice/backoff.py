"""Reconnecting to Redis: bounded, jittered backoff, and one log line per outage.

Every loop that talks to Redis (worker claims, housekeeping, the gateway's
pub/sub and snapshots, the autoscaler) retries a failed round trip after a
delay from :class:`Backoff` and reports through :class:`Outage`, so an outage
of any length costs a bounded retry rate and a handful of log lines: one when
it starts, a reminder every ``remind_every_s``, one when Redis answers again.
Both are pure (the clock and the random source are passed in); see ADR 0065.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

MAX_EXPONENT = 30  # 2**30 x any sane base is far past any cap: no float overflow


@dataclass
class Backoff:
    """Exponential backoff with equal jitter: the n-th delay is uniform in
    [c/2, c] with c = min(cap_s, base_s x 2^n).

    Half the delay is fixed, so a failing loop never spins (no zero delay), and
    half is random, so many processes that lost Redis together do not all
    reconnect in the same instant when it comes back.
    """

    base_s: float = 0.1
    cap_s: float = 2.0
    attempt: int = 0

    def next_s(self, rand: Callable[[], float] = random.random) -> float:
        ceiling = min(self.cap_s, self.base_s * 2 ** min(self.attempt, MAX_EXPONENT))
        self.attempt += 1
        return ceiling / 2 + rand() * ceiling / 2

    def reset(self) -> None:
        self.attempt = 0


@dataclass
class Outage:
    """What to log about one dependency's outages (pure; ``now`` in seconds passed in).

    ``failed`` returns a message for the first failure of an outage and for a
    reminder every ``remind_every_s`` while it lasts, else None; ``recovered``
    returns a message once when the outage ends, else None.
    """

    what: str
    remind_every_s: float = 60.0
    since: float | None = None
    reminded_at: float = 0.0
    failures: int = 0

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, now: float, error: object) -> str | None:
        self.failures += 1
        if self.since is None:
            self.since = self.reminded_at = now
            return f"{self.what}: Redis unavailable ({error}); retrying with backoff"
        if now - self.reminded_at >= self.remind_every_s:
            self.reminded_at = now
            return (
                f"{self.what}: Redis still unavailable after {now - self.since:.0f} s "
                f"({self.failures} failed tries; last: {error})"
            )
        return None

    def recovered(self, now: float) -> str | None:
        if self.since is None:
            return None
        msg = (
            f"{self.what}: Redis answers again after {now - self.since:.1f} s "
            f"({self.failures} failed tries)"
        )
        self.since, self.failures = None, 0
        return msg


class Reconnect:
    """The shell loops use: an :class:`Outage` and a :class:`Backoff` behind a lock
    (a worker's batch and prefetch threads share one), logging to ``log``."""

    def __init__(
        self,
        log: logging.Logger,
        what: str,
        *,
        base_s: float = 0.1,
        cap_s: float = 2.0,
        remind_every_s: float = 60.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.log = log
        self.outage = Outage(what, remind_every_s)
        self.backoff = Backoff(base_s, cap_s)
        self.clock = clock or time.monotonic
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self.outage.down

    def failed(self, error: object) -> float:
        """Note a failed round trip; returns how long to wait before the next try."""
        with self._lock:
            msg = self.outage.failed(self.clock(), error)
            delay = self.backoff.next_s()
        if msg:
            self.log.warning(msg)
        return delay

    def ok(self) -> None:
        """Note a round trip that worked (cheap when nothing was wrong)."""
        if not self.outage.down:
            return
        with self._lock:
            msg = self.outage.recovered(self.clock())
            self.backoff.reset()
        if msg:
            self.log.warning(msg)
