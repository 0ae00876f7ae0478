"""The simulated workers by state, with an optional warm pool (docs/adr/0128).

Split from :mod:`autoscaler.sim.simulator`, which drives it: the simulator owns the
queue and the clock, the fleet only which worker is where.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field


@dataclass
class Fleet:
    """Workers by state; ids only matter to pair drains with completions.

    With a warm pool (``pool_size`` > 0), parked workers wait started but serve
    nothing: a scale-up promotes them first (serving ``promote_s`` later) and starts
    a replacement behind each one (parked after a cold start), so the pool holds
    ``pool_size`` parked or refilling workers. A scale-down parks instead of stopping
    while a refill is still starting (that refill is cancelled: the pool gets a warm
    worker at once), and a cancelled promotion goes back to the pool.
    """

    idle: list[int] = field(default_factory=list)
    busy: list[tuple[float, int]] = field(default_factory=list)  # heap (finish_s, id)
    starting: list[tuple[float, int]] = field(default_factory=list)  # heap (ready_s, id)
    draining: set[int] = field(default_factory=set)
    next_id: int = 0
    pool_size: int = 0
    promote_s: float = 0.0
    park_on_scale_down: bool = True
    parked: list[int] = field(default_factory=list)
    refilling: list[tuple[float, int]] = field(default_factory=list)  # heap (parked_s, id)
    promoting: set[int] = field(default_factory=set)  # starting ids that were parked
    promotions: int = 0

    @property
    def current(self) -> int:
        return len(self.idle) + len(self.busy) + len(self.starting) - len(self.draining)

    @property
    def alive(self) -> int:
        return len(self.idle) + len(self.busy) + len(self.starting)

    @property
    def pool(self) -> int:
        return len(self.parked) + len(self.refilling)

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def add(self, n: int, now_s: float, cold_s: float) -> None:
        while n > 0 and self.parked:
            wid = self.parked.pop()
            self.promoting.add(wid)
            heapq.heappush(self.starting, (now_s + self.promote_s, wid))
            self.promotions += 1
            n -= 1
        for _ in range(n):
            heapq.heappush(self.starting, (now_s + cold_s, self._new_id()))
        self.refill(now_s, cold_s)

    def refill(self, now_s: float, cold_s: float) -> None:
        while self.pool < self.pool_size:
            heapq.heappush(self.refilling, (now_s + cold_s, self._new_id()))

    def resize(self, size: int, now_s: float, cold_s: float) -> None:
        """A new pool size (``warm_pool.size: auto``): refill up to it, or trim the
        refills (latest warm first), then the parked workers, down to it."""
        self.pool_size = size
        self.refill(now_s, cold_s)
        self._trim()

    def _trim(self) -> None:
        while self.pool > self.pool_size and self.refilling:
            self.refilling.sort()
            self.refilling.pop()
        del self.parked[self.pool_size :]

    def _park(self, wid: int) -> bool:
        """Park a serving worker instead of stopping it, if the pool wants it."""
        if not (self.park_on_scale_down and self.refilling):
            return False
        self.refilling.sort()
        self.refilling.pop()  # the refill that would be warm last
        self.parked.append(wid)
        return True

    def ready(self) -> None:
        """The earliest starting worker is ready to serve."""
        _, wid = heapq.heappop(self.starting)
        self.promoting.discard(wid)
        self.idle.append(wid)

    def finished(self, wid: int) -> None:
        """A busy worker finished its job."""
        if wid in self.draining:
            self.draining.discard(wid)
            self._park(wid)
        else:
            self.idle.append(wid)

    def remove(self, n: int) -> None:
        # Cheapest first: starting workers (latest ready first; a promoted one goes
        # back to the pool), then idle (parked while a refill starts), then drain busy.
        if n > 0 and self.starting:
            self.starting.sort()
            k = min(n, len(self.starting))
            for _, wid in self.starting[len(self.starting) - k :]:
                if wid in self.promoting:
                    self.promoting.discard(wid)
                    self.parked.append(wid)
            del self.starting[len(self.starting) - k :]
            n -= k
        while n > 0 and self.idle:
            self._park(self.idle.pop())
            n -= 1
        for _, wid in sorted(self.busy):
            if n <= 0:
                break
            if wid not in self.draining:
                self.draining.add(wid)
                n -= 1
        self._trim()
