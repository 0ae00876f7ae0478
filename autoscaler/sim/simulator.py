"""Replay a trace through a controller against a queueing model of workers.

The model is the shared queue Sluice builds: one FIFO queue, k workers that each
serve one job at a time at ``service_rate`` cost units/s (an M/G/k queue whose
k the controller changes). A new worker is paid for from the moment it is asked
for and serves only after ``cold_start_s``; a scale-down cancels starting
workers first, then stops idle ones, and lets busy ones finish (drain). The
controller sees the same observation the real observer builds, every
``period_s``. Pure Python, an event loop: a 30-minute trace runs in about a
second.

Replicas may share what limits them (``capacity_cost_per_s``: cores, one GPU): then
a job served starts at ``min(service_rate, capacity / jobs in service)``, its rate
fixed when it starts, so adding replicas adds no drain rate past the capacity. The
completion rates the saturation guard reads (docs/adr/0126) come from the simulated
completions through the observer's own arithmetic (:mod:`autoscaler.rates`), so a
replay caps a scale-up where the live autoscaler would.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from autoscaler.observation import Observation
from autoscaler.policy import BURST_RATE_S, MIN_RATE_COVERAGE, RECENT_RATE_S
from autoscaler.rates import Sample, window_rates
from autoscaler.sim.controllers import Controller, Oracle
from autoscaler.sim.fleet import Fleet
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


class _Sim:
    def __init__(
        self,
        trace: Trace,
        ctl: Controller,
        policy: AutoscalingConfig,
        service_rate: float,
        cold_start_s: float,
        initial: int,
        capacity_cost_per_s: float | None = None,
    ) -> None:
        self.trace, self.ctl, self.p = trace, ctl, policy
        self.mu, self.cold_s = service_rate, cold_start_s
        self.capacity = capacity_cost_per_s
        wp = policy.warm_pool
        # size: auto starts from its initial size (else one parked per serving replica).
        pool = max(1, initial) if wp.auto and wp.initial_size is None else wp.start_size
        self.fleet = Fleet(
            idle=list(range(initial)),
            next_id=initial + pool,
            pool_size=pool,
            promote_s=wp.promote_s,
            park_on_scale_down=wp.park_on_scale_down,
            parked=list(range(initial, initial + pool)),  # the pool starts warm too
        )
        self.parked_cost = wp.cost_fraction
        self.queue: deque[int] = deque()
        self.queued_cost = 0.0
        # The arrivals in each rate window are trace indices [head, arrived): the metrics
        # window, the recent and the burst rate's, and the trend window's halves
        # (predict.window_s; arrivals move from new to old). Each keeps its cost sum.
        self.arrived = 0
        self.rate_heads = [0, 0, 0]  # the metrics window, the recent rate's, the burst rate's
        self.rate_costs = [0.0, 0.0, 0.0]
        self.trend_old_head = self.trend_new_head = 0
        self.trend_sums = [0.0, 0.0]  # old, new
        # Cumulative arrived and completed cost, sampled once per decision as the
        # observer samples the queue's counters; serving[wid]: the cost in service.
        self.arrived_cost = self.completed_cost = 0.0
        self.samples: deque[Sample] = deque()
        self.serving: dict[int, float] = {}
        self.hists: dict[int, list[int]] = {}
        self.waits = [math.inf] * len(trace.times_s)
        self.replica_s = 0.0  # serving and refilling workers in full, parked at their share
        self.pool_s = 0.0  # the part of replica_s the pool cost (parked and refilling)
        self.events: list[int] = []  # +1 / -1 per scale action
        self.timeline: list[tuple[float, int, int, float]] = []

    def dispatch(self, t: float) -> None:
        f, times, costs = self.fleet, self.trace.times_s, self.trace.costs
        idle, busy, queue, slot = f.idle, f.busy, self.queue, waits.slot
        h: list[int] | None = None  # the window's histogram: t is the same for every job here
        while idle and queue:
            j = queue.popleft()
            self.queued_cost -= costs[j]
            wait = t - times[j]
            self.waits[j] = wait
            if h is None:
                h = self.hists.setdefault(waits.window_start(t), [0] * len(waits.LABELS))
            h[slot(wait * 1000.0)] += 1
            wid = idle.pop()
            self.serving[wid] = costs[j]
            rate = self.mu if self.capacity is None else self.job_rate(len(busy) + 1)
            heapq.heappush(busy, (t + costs[j] / rate, wid))

    def job_rate(self, in_service: int) -> float:
        """Cost units/s a job is served at with ``in_service`` jobs running (this one
        included): the replicas' own rate, or their share of a shared capacity."""
        if self.capacity is None:
            return self.mu
        return min(self.mu, self.capacity / max(1, in_service))

    def observe(self, t: float) -> Observation:
        f, span = self.fleet, self.p.metrics_window_s
        short, burst = min(span, RECENT_RATE_S), min(span, BURST_RATE_S)
        heads, costs = self.rate_heads, self.rate_costs
        for k, width in enumerate((span, short, burst)):
            heads[k], costs[k] = self._drop(heads[k], t - width, costs[k])
        slope = self._slope(t)
        done_long, done_recent = self._completion_rates(t)
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
            arrival_rate_cost=_rate(costs[0], span, t),
            arrival_rate_cost_recent=_rate(costs[1], short, t),
            arrival_rate_cost_burst=_rate(costs[2], burst, t),
            arrival_rate_slope=slope,
            completion_rate_cost=done_long,
            completion_rate_cost_recent=done_recent,
            # What the workers' heartbeats would measure: per busy worker, its share.
            service_rate=self.job_rate(len(f.busy)) if ready > 0 else None,
            p99_wait_ms=waits.quantile_ms(counts) if counts else None,
            oldest_wait_ms=oldest,
            cold_start_s=self.cold_s if f.next_id > 0 else None,
            promote_s=f.promote_s if f.promotions else None,
        )

    def _completion_rates(self, t: float) -> tuple[float | None, float | None]:
        """The completion rates over the metrics window and the recent one, from the
        samples taken at each decision, exactly as the observer computes them."""
        span = self.p.metrics_window_s
        now = Sample(t, self.arrived_cost, self.completed_cost)
        long = window_rates(self.samples, now, span)
        recent = window_rates(self.samples, now, min(span, RECENT_RATE_S))
        self.samples.append(now)
        while self.samples and self.samples[0].t_s < t - span - 60:
            self.samples.popleft()
        return (long[1] if long else None), (recent[1] if recent else None)

    def _drop(
        self, head: int, before_s: float, total: float, end: int | None = None
    ) -> tuple[int, float]:
        """Leave out of a window (arrivals ``head`` to ``end``, by default the last
        one) those at ``before_s`` or earlier: the new head, and ``total`` less
        their costs."""
        times, costs = self.trace.times_s, self.trace.costs
        end = self.arrived if end is None else end
        while head < end and times[head] <= before_s:
            total -= costs[head]
            head += 1
        return head, total

    def _slope(self, t: float) -> float | None:
        """As the observer computes it: the newer half-window's rate minus the older
        half's, over half the window; None until the whole window is covered."""
        half = self.p.predict.window_s / 2
        times, costs, sums = self.trace.times_s, self.trace.costs, self.trend_sums
        new, end = self.trend_new_head, self.arrived
        while new < end and times[new] <= t - half:
            sums[1] -= costs[new]
            sums[0] += costs[new]
            new += 1
        self.trend_new_head = new
        self.trend_old_head, sums[0] = self._drop(self.trend_old_head, t - 2 * half, sums[0], new)
        if t < 2 * half:
            return None
        return (sums[1] - sums[0]) / half / half

    def tick(self, t: float) -> None:
        obs = self.observe(t)
        d = self.ctl.decide(obs, t)
        desired = max(0, d.desired)
        if d.pool is not None and d.pool.size != self.fleet.pool_size:
            self.fleet.resize(d.pool.size, t, self.cold_s)
        if desired > obs.current:
            self.fleet.add(desired - obs.current, t, self.cold_s)
            self.events.append(1)
        elif desired < obs.current:
            self.fleet.remove(obs.current - desired)
            self.events.append(-1)
        self.timeline.append((t, self.fleet.alive, obs.queued or 0, obs.p99_wait_ms or 0.0))

    def arrive(self, j: int) -> None:
        """Job ``j`` (the next in the trace) joins the queue and every rate window."""
        c = self.trace.costs[j]
        self.queue.append(j)
        self.arrived = j + 1
        self.queued_cost += c
        self.arrived_cost += c
        rates = self.rate_costs
        rates[0] += c
        rates[1] += c
        rates[2] += c
        self.trend_sums[1] += c

    def run(self) -> None:
        """The event loop. Its hot path (an arrival or a completion, some 99% of the
        events) does inline what it can and dispatches only when a job can start."""
        times, n, f = self.trace.times_s, len(self.trace.times_s), self.fleet
        idle, busy, starting, refilling, parked = f.idle, f.busy, f.starting, f.refilling, f.parked
        queue, parked_cost, inf, heappop = self.queue, self.parked_cost, math.inf, heapq.heappop
        draining, serving, replica_s, pool_s = f.draining, self.serving, 0.0, 0.0
        end = self.trace.duration_s + DRAIN_AFTER_S
        # The first decision comes one period in, as in the control loop: rates need a window.
        i, t_prev, next_tick = 0, 0.0, self.p.period_s
        while True:
            t_arr = times[i] if i < n else inf
            t_done = busy[0][0] if busy else inf
            t_ready = starting[0][0] if starting else inf
            t_parked = refilling[0][0] if refilling else inf
            t = min(t_arr, t_done, t_ready, t_parked, next_tick)
            if t > end or (
                i >= n and not queue and not busy and t == next_tick and t > self.trace.duration_s
            ):
                break
            pool = len(refilling) + parked_cost * len(parked)
            replica_s += (len(idle) + len(busy) + len(starting) + pool) * (t - t_prev)
            pool_s += pool * (t - t_prev)
            t_prev = t
            if t == t_done:
                _, wid = heappop(busy)
                self.completed_cost += serving.pop(wid)
                if wid in draining:
                    f.finished(wid)
                else:
                    idle.append(wid)
                if not queue:
                    continue
            elif t == t_ready:
                f.ready()
            elif t == t_parked:
                parked.append(heappop(refilling)[1])
            elif t == t_arr:
                self.arrive(i)
                i += 1
                if not idle:
                    continue
            else:
                self.tick(t)
                next_tick = t + self.p.period_s
            self.dispatch(t)
        self.replica_s, self.pool_s = replica_s, pool_s
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
    capacity_cost_per_s: float | None = None,
) -> SimResult:
    """Run one controller over one trace; waits are judged against the policy's SLO.
    ``capacity_cost_per_s``: what all replicas together can serve (None: no limit)."""
    sim = _Sim(trace, ctl, policy, service_rate, cold_start_s, initial, capacity_cost_per_s)
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
