"""Pure bookkeeping of the batch loop: token budget, service rate, failure streak."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class TokenBudget:
    """This worker's claim budget in cost units, lowered on out-of-memory.

    After an OOM the budget drops to half of the failed batch's cost (never under
    ``floor``); after ``recover_after`` good batches in a row it grows by
    ``recover_factor`` back towards ``ceiling``, so one unlucky batch does not
    cost throughput for good, and a real memory limit is found again quickly.
    """

    ceiling: int
    floor: int = 1
    recover_after: int = 20
    recover_factor: float = 1.25
    current: int = 0
    _good: int = 0

    def __post_init__(self) -> None:
        self.current = self.current or self.ceiling

    def on_oom(self, batch_cost: int) -> int:
        self.current = max(self.floor, min(self.current, batch_cost // 2))
        self._good = 0
        return self.current

    def cap(self, limit: int) -> int:
        """A limit the device showed at warm-up: lowers the ceiling for good."""
        self.ceiling = max(self.floor, min(self.ceiling, limit))
        self.current = min(self.current, self.ceiling)
        return self.current

    def on_success(self) -> int:
        if self.current >= self.ceiling:
            return self.current
        self._good += 1
        if self._good >= self.recover_after:
            self._good = 0
            grown = max(self.current + 1, int(self.current * self.recover_factor))
            self.current = min(self.ceiling, grown)
        return self.current


@dataclass
class ServiceRate:
    """Cost units per busy second over the last ``window`` batches."""

    window: int = 50
    _samples: deque[tuple[int, float]] = field(default_factory=deque)

    def add(self, cost: int, seconds: float) -> None:
        self._samples.append((cost, max(seconds, 1e-6)))
        while len(self._samples) > self.window:
            self._samples.popleft()

    @property
    def rate(self) -> float:
        seconds = sum(s for _, s in self._samples)
        return sum(c for c, _ in self._samples) / seconds if seconds > 0 else 0.0


@dataclass
class BucketServiceMs:
    """Measured milliseconds per job, per bucket (an EWMA), for the claim's bucket choice."""

    alpha: float = 0.2
    ms: dict[str, float] = field(default_factory=dict)

    def add(self, bucket: str, jobs: int, seconds: float) -> None:
        if jobs <= 0:
            return
        sample = seconds * 1000 / jobs
        old = self.ms.get(bucket)
        self.ms[bucket] = sample if old is None else old + self.alpha * (sample - old)


@dataclass
class FailureStreak:
    """Consecutive failed batches; ``tripped`` once it reaches ``limit``."""

    limit: int
    count: int = 0

    def record(self, failed: bool) -> bool:
        self.count = self.count + 1 if failed else 0
        return self.tripped

    @property
    def tripped(self) -> bool:
        return self.count >= self.limit
