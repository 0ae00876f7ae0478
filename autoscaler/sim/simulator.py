"""Replay a trace through a controller against a queueing model of workers.

The model is the shared queue Sluice builds: one FIFO queue, k workers that each
serve one job at a time at ``service_rate`` cost units/s (an M/G/k queue whose
k the controller changes). A new worker is paid for from the moment it is asked
for and serves only after ``cold_start_s``; a scale-down cancels starting
workers first, then stops idle ones, and lets busy ones finish (drain). The
controller sees the same observation the real observer builds, every
``period_s``. Pure Python, an event loop: a 30-minute trace runs in about a
second.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from autoscaler.observation import Observation
from autoscaler.policy import BURST_RATE_S, MIN_RATE_COVERAGE, RECENT_RATE_S
from autoscaler.sim.controllers import Controller, Oracle
from autoscaler.sim.traces import Trace
from sluice import waits
from sluice.config import AutoscalingConfig

DRAIN_AFTER_S = 600.0  # keep simulating this long after the last arrival


@dataclass
class SimResult:
    policy: str
    trace: str
    jobs: int
    slo_attainment: float
    p99_wait_ms: float
    mean_wait_ms: float
    replica_seconds: float
    scale_events: int
    flaps: int
    max_replicas: int
    pool_seconds: float = 0.0  # part of replica_seconds: parked (at their cost share), refills
    promotions: int = 0
    timeline: list[tuple[float, int, int, float]] = field(default_factory=list, repr=False)

    def summary(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "timeline"}
        return d


@dataclass
class _Fleet:
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
        while self.pool > self.pool_size and self.refilling:
            self.refilling.sort()
            self.refilling.pop()
        del self.parked[self.pool_size :]


class _Sim:
    def __init__(
        self,
        trace: Trace,
        ctl: Controller,
        policy: AutoscalingConfig,
        service_rate: float,
        cold_start_s: float,
        initial: int,
    ) -> None:
        self.trace, self.ctl, self.p = trace, ctl, policy
        self.mu, self.cold_s = service_rate, cold_start_s
        wp = policy.warm_pool
        self.fleet = _Fleet(
            idle=list(range(initial)),
            next_id=initial + wp.size,
            pool_size=wp.size,
            promote_s=wp.promote_s,
            park_on_scale_down=wp.park_on_scale_down,
            parked=list(range(initial, initial + wp.size)),  # the pool starts warm too
        )
        self.parked_cost = wp.cost_fraction
        self.queue: deque[int] = deque()
        self.queued_cost = 0.0
        self.window: deque[tuple[float, float]] = deque()  # arrivals in the metrics window
        self.window_cost = 0.0
        self.recent: deque[tuple[float, float]] = deque()
        self.recent_cost = 0.0
        self.burst: deque[tuple[float, float]] = deque()
        self.burst_cost = 0.0
        # The trend window's halves (predict.window_s): arrivals move from new to old.
        self.trend_new: deque[tuple[float, float]] = deque()
        self.trend_old: deque[tuple[float, float]] = deque()
        self.trend_sums = [0.0, 0.0]  # old, new
        self.hists: dict[int, list[int]] = {}
        self.waits = [math.inf] * len(trace.times_s)
        self.replica_s = 0.0  # serving and refilling workers in full, parked at their share
        self.pool_s = 0.0  # the part of replica_s the pool cost (parked and refilling)
        self.events: list[int] = []  # +1 / -1 per scale action
        self.timeline: list[tuple[float, int, int, float]] = []

    def dispatch(self, t: float) -> None:
        f, times, costs = self.fleet, self.trace.times_s, self.trace.costs
        while f.idle and self.queue:
            j = self.queue.popleft()
            self.queued_cost -= costs[j]
            wait = t - times[j]
            self.waits[j] = wait
            h = self.hists.setdefault(waits.window_start(t), [0] * len(waits.LABELS))
            h[waits.slot(wait * 1000.0)] += 1
            heapq.heappush(f.busy, (t + costs[j] / self.mu, f.idle.pop()))

    def observe(self, t: float) -> Observation:
        f, span = self.fleet, self.p.metrics_window_s
        while self.window and self.window[0][0] <= t - span:
            self.window_cost -= self.window.popleft()[1]
        short = min(span, RECENT_RATE_S)
        while self.recent and self.recent[0][0] <= t - short:
            self.recent_cost -= self.recent.popleft()[1]
        burst = min(span, BURST_RATE_S)
        while self.burst and self.burst[0][0] <= t - burst:
            self.burst_cost -= self.burst.popleft()[1]
        slope = self._slope(t)
        recent = [self.hists[w] for w in waits.recent_windows(t) if w in self.hists]
        counts = [sum(col) for col in zip(*recent, strict=True)] if recent else []
        ready = len(f.idle) + len(f.busy) - len(f.draining)
        oldest = (t - self.trace.times_s[self.queue[0]]) * 1000.0 if self.queue else 0.0
        return Observation(
            current=f.current,
            ready=ready,
            starting=len(f.starting),
            draining=len(f.draining),
            parked=len(f.parked),
            queued=len(self.queue),
            queued_cost=max(0.0, self.queued_cost),
            in_flight=len(f.busy),
            arrival_rate_cost=_rate(self.window_cost, span, t),
            arrival_rate_cost_recent=_rate(self.recent_cost, short, t),
            arrival_rate_cost_burst=_rate(self.burst_cost, burst, t),
            arrival_rate_slope=slope,
            service_rate=self.mu if ready > 0 else None,
            p99_wait_ms=waits.quantile_ms(counts) if counts else None,
            oldest_wait_ms=oldest,
            cold_start_s=self.cold_s if f.next_id > 0 else None,
            promote_s=f.promote_s if f.promotions else None,
        )

    def _slope(self, t: float) -> float | None:
        """As the observer computes it: the newer half-window's rate minus the older
        half's, over half the window; None until the whole window is covered."""
        half = self.p.predict.window_s / 2
        while self.trend_new and self.trend_new[0][0] <= t - half:
            item = self.trend_new.popleft()
            self.trend_sums[1] -= item[1]
            self.trend_old.append(item)
            self.trend_sums[0] += item[1]
        while self.trend_old and self.trend_old[0][0] <= t - 2 * half:
            self.trend_sums[0] -= self.trend_old.popleft()[1]
        if t < 2 * half:
            return None
        return (self.trend_sums[1] - self.trend_sums[0]) / half / half

    def tick(self, t: float) -> None:
        obs = self.observe(t)
        d = self.ctl.decide(obs, t)
        desired = max(0, d.desired)
        if desired > obs.current:
            self.fleet.add(desired - obs.current, t, self.cold_s)
            self.events.append(1)
        elif desired < obs.current:
            self.fleet.remove(obs.current - desired)
            self.events.append(-1)
        self.timeline.append((t, self.fleet.alive, obs.queued or 0, obs.p99_wait_ms or 0.0))

    def complete(self, t: float) -> None:
        _, wid = heapq.heappop(self.fleet.busy)
        self.fleet.finished(wid)

    def arrive(self, j: int) -> None:
        t, c = self.trace.times_s[j], self.trace.costs[j]
        self.queue.append(j)
        self.queued_cost += c
        self.window.append((t, c))
        self.window_cost += c
        self.recent.append((t, c))
        self.recent_cost += c
        self.burst.append((t, c))
        self.burst_cost += c
        self.trend_new.append((t, c))
        self.trend_sums[1] += c

    def run(self) -> None:
        times, n, f = self.trace.times_s, len(self.trace.times_s), self.fleet
        end = self.trace.duration_s + DRAIN_AFTER_S
        # The first decision comes one period in, as in the control loop: rates need a window.
        i, t_prev, next_tick = 0, 0.0, self.p.period_s
        while True:
            t_arr = times[i] if i < n else math.inf
            t_done = f.busy[0][0] if f.busy else math.inf
            t_ready = f.starting[0][0] if f.starting else math.inf
            t_parked = f.refilling[0][0] if f.refilling else math.inf
            t = min(t_arr, t_done, t_ready, t_parked, next_tick)
            if t > end or (
                i >= n
                and not self.queue
                and not f.busy
                and t == next_tick
                and t > self.trace.duration_s
            ):
                break
            pool = len(f.refilling) + self.parked_cost * len(f.parked)
            self.replica_s += (f.alive + pool) * (t - t_prev)
            self.pool_s += pool * (t - t_prev)
            t_prev = t
            if t == t_done:
                self.complete(t)
            elif t == t_ready:
                f.ready()
            elif t == t_parked:
                f.parked.append(heapq.heappop(f.refilling)[1])
            elif t == t_arr:
                self.arrive(i)
                i += 1
            else:
                self.tick(t)
                next_tick = t + self.p.period_s
            self.dispatch(t)
        for j in range(n):  # never served: waited until the end
            if self.waits[j] == math.inf:
                self.waits[j] = end - times[j]


def _rate(total: float, span_s: float, t: float) -> float | None:
    """As the observer reports it: None until the window is covered enough."""
    if t < MIN_RATE_COVERAGE * span_s:
        return None
    return total / min(span_s, t)


def _flaps(events: list[int]) -> int:
    return sum(1 for a, b in zip(events, events[1:], strict=False) if a != b)


def simulate(
    trace: Trace,
    ctl: Controller,
    policy: AutoscalingConfig,
    service_rate: float,
    cold_start_s: float,
    initial: int,
) -> SimResult:
    """Run one controller over one trace; waits are judged against the policy's SLO."""
    sim = _Sim(trace, ctl, policy, service_rate, cold_start_s, initial)
    sim.run()
    ws = sorted(sim.waits)
    slo_s = policy.p99_wait_slo_ms / 1000.0
    n = len(ws)
    met = sum(1 for w in ws if w <= slo_s)
    p99 = ws[min(n - 1, math.ceil(0.99 * n) - 1)] * 1000.0 if n else 0.0
    return SimResult(
        policy=ctl.name,
        trace=trace.name,
        jobs=n,
        slo_attainment=met / n if n else 1.0,
        p99_wait_ms=round(p99, 1),
        mean_wait_ms=round(1000.0 * sum(ws) / n, 1) if n else 0.0,
        replica_seconds=round(sim.replica_s, 1),
        scale_events=len(sim.events),
        flaps=_flaps(sim.events),
        max_replicas=max((x[1] for x in sim.timeline), default=initial),
        pool_seconds=round(sim.pool_s, 1),
        promotions=sim.fleet.promotions,
        timeline=sim.timeline,
    )


def _rate_estimate(trace: Trace) -> Any:
    """The trace's cost rate per second: its true rate if known, else a 60 s average."""
    if trace.rate_jobs is not None:
        rate, mean, end = trace.rate_jobs, trace.mean_cost, trace.duration_s
        return lambda t: rate(t) * mean if 0 <= t < end else 0.0
    per_s = [0.0] * (int(trace.duration_s) + 2)
    for t, c in zip(trace.times_s, trace.costs, strict=True):
        per_s[int(t)] += c
    span = 60
    prefix = [0.0]
    for v in per_s:
        prefix.append(prefix[-1] + v)

    def est(t: float) -> float:
        i = min(max(int(t), 0), len(per_s) - 1)
        lo, hi = max(0, i - span // 2), min(len(per_s), i + span // 2)
        return (prefix[hi] - prefix[lo]) / max(1, hi - lo)

    return est


def oracle(
    trace: Trace, policy: AutoscalingConfig, service_rate: float, cold_start_s: float
) -> Oracle:
    """Perfect foresight at the policy's target utilisation: at each tick, the replicas
    the highest rate between now and one cold start (plus a period) ahead needs, so a
    new replica is ready when the load arrives; no hysteresis beyond that."""
    rate = _rate_estimate(trace)
    per_replica = service_rate * policy.target_utilization
    lead = cold_start_s + policy.period_s
    steps = max(2, math.ceil(lead))  # sample the rate every second or so

    def schedule(t: float) -> int:
        peak = max(rate(t + lead * k / steps) for k in range(steps + 1))
        n = math.ceil(peak / per_replica - 1e-9)
        return max(policy.min_replicas, min(policy.max_replicas, n))

    return Oracle(schedule, lead_s=0.0)


def initial_replicas(trace: Trace, policy: AutoscalingConfig, service_rate: float) -> int:
    """Every controller starts warm, sized for the highest rate of the first metrics window."""
    return oracle(trace, policy, service_rate, policy.metrics_window_s).schedule(0.0)
