"""Dispatch strategies on one trace and one fixed fleet: pull from shared queues vs push.

The workers are the autoscaler simulator's: ``replicas`` identical workers, each
serving one job at a time at ``service_rate`` cost units/s, so a job takes
``cost / service_rate`` seconds wherever it runs. Only the dispatch differs:

- ``pull``: Sluice. One queue per size bucket; a free worker takes the head the
  claim script would pick (highest response ratio next, overdue heads oldest
  first; ``sluice/queue/lua/claim.lua``, ADR 0002).
- ``pull-fifo``: one shared FIFO queue (the autoscaler simulator's M/G/k model):
  pull without buckets, to separate what pooling buys from what buckets buy.
- ``round-robin``, ``least-connections``, ``power-of-two``: push. Each worker has
  its own FIFO queue and the balancer decides at arrival, as a proxy in front of
  replicas does. Least-connections counts a worker's queued plus running jobs and
  breaks ties round-robin; power-of-two samples two workers (seeded) and takes
  the one with fewer.

Pure and deterministic: a trace in, per-job start and finish times out.
"""

from __future__ import annotations

import bisect
import heapq
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autoscaler.sim.traces import Trace

PULL = ("pull", "pull-fifo")
PUSH = ("round-robin", "least-connections", "power-of-two")
STRATEGIES = PULL + PUSH


@dataclass(frozen=True)
class Fleet:
    """The workers every strategy gets, and the claim rule's settings."""

    replicas: int
    service_rate: float  # cost units/s of one worker
    buckets: tuple[int, ...] = (32, 128, 512)
    overdue_factor: float = 20.0


@dataclass(frozen=True)
class Run:
    """Per-job outcome of one strategy on one trace (indexes follow the trace)."""

    strategy: str
    trace: Trace
    fleet: Fleet
    bucket: list[int]  # index into fleet.buckets
    start_s: list[float]
    finish_s: list[float]

    def wait_s(self, j: int) -> float:
        return self.start_s[j] - self.trace.times_s[j]

    def e2e_s(self, j: int) -> float:
        return self.finish_s[j] - self.trace.times_s[j]


def bucket_index(cost: float, buckets: Sequence[int]) -> int:
    """The smallest bound >= cost, as CostEstimator.bucket_for picks it; a cost over
    the largest bound (the gateway would refuse it) counts in the largest bucket."""
    return min(bisect.bisect_left(buckets, cost), len(buckets) - 1)


def service_s(trace: Trace, fleet: Fleet) -> list[float]:
    return [c / fleet.service_rate for c in trace.costs]


def bucket_service_s(bucket: list[int], svc: list[float], n_buckets: int) -> list[float]:
    """Mean service time per job in each bucket: what workers measure and report to the
    claim script (BucketServiceMs), at steady state. An empty bucket never has a head."""
    total, count = [0.0] * n_buckets, [0] * n_buckets
    for b, s in zip(bucket, svc, strict=True):
        total[b] += s
        count[b] += 1
    return [total[b] / count[b] if count[b] else 1.0 for b in range(n_buckets)]


# A pick takes the queues' head job ids (None for an empty queue) and the time,
# and returns the queue to serve.
Pick = Callable[[list[int | None], float], int]


def hrrn_pick(times_s: list[float], expected_s: list[float], overdue_factor: float) -> Pick:
    """The claim script's bucket choice: highest (wait + S_b) / S_b over the heads, except
    that heads waiting over overdue_factor x S_b go first, oldest first. Ties go to the
    first bucket in served order, as in the script (strict comparisons). Every job here
    has the same priority, so the priority weights drop out."""

    def pick(heads: list[int | None], now: float) -> int:
        best, best_ratio, oldest, oldest_enq = -1, -1.0, -1, float("inf")
        for b, j in enumerate(heads):
            if j is None:
                continue
            enq, s = times_s[j], expected_s[b]
            wait = max(now - enq, 0.0)
            ratio = (wait + s) / s
            if ratio > best_ratio:
                best, best_ratio = b, ratio
            if wait > overdue_factor * s and enq < oldest_enq:
                oldest, oldest_enq = b, enq
        return oldest if oldest >= 0 else best

    return pick


def fifo_pick(heads: list[int | None], now: float) -> int:
    """The oldest head across queues: one FIFO queue, whatever the buckets."""
    return min((j, b) for b, j in enumerate(heads) if j is not None)[1]


def _pull(
    trace: Trace, svc: list[float], k: int, queue_of: list[int], n_queues: int, pick: Pick
) -> list[float]:
    """Work-conserving by construction: the earliest free worker takes the picked head
    at once if anything waits, else the next arrival the moment it comes. Identical
    workers make "which idle worker" irrelevant, so a heap of free times is the fleet."""
    times, n = trace.times_s, len(trace.times_s)
    free = [0.0] * k  # already a heap
    queues: list[deque[int]] = [deque() for _ in range(n_queues)]
    start = [0.0] * n
    i = waiting = 0
    t = 0.0
    for _ in range(n):
        f = heapq.heappop(free)
        # A worker free before the last pick has idled since: it starts no earlier.
        t = max(f, t) if waiting else max(f, times[i])
        while i < n and times[i] <= t:
            queues[queue_of[i]].append(i)
            i += 1
            waiting += 1
        b = pick([q[0] if q else None for q in queues], t)
        j = queues[b].popleft()
        waiting -= 1
        start[j] = t
        heapq.heappush(free, t + svc[j])
    return start


# A chooser takes the job index, the arrival time and each worker's outstanding
# count (queued + running), and returns the worker.
Choose = Callable[[int, float, list[int]], int]


def round_robin(k: int) -> Choose:
    return lambda j, _t, _load: j % k


def least_connections(k: int) -> Choose:
    def choose(j: int, _t: float, load: list[int]) -> int:
        low = min(load)
        for d in range(k):  # ties round-robin, so an idle fleet spreads evenly
            w = (j + d) % k
            if load[w] == low:
                return w
        raise AssertionError("unreachable")

    return choose


def power_of_two(k: int, seed: int) -> Choose:
    rng = random.Random(seed)

    def choose(_j: int, _t: float, load: list[int]) -> int:
        if k == 1:
            return 0
        a, b = rng.sample(range(k), 2)
        return b if load[b] < load[a] else a

    return choose


def _push(trace: Trace, svc: list[float], k: int, choose: Choose) -> list[float]:
    """Each worker serves its own FIFO queue, so a job's start is fixed when it is
    assigned: max(arrival, the worker's last finish). Outstanding counts come from the
    finish times still ahead of the arrival."""
    times = trace.times_s
    ahead: list[deque[float]] = [deque() for _ in range(k)]  # finish times, ascending
    last = [0.0] * k
    start = [0.0] * len(times)
    for j, t in enumerate(times):
        for q in ahead:
            while q and q[0] <= t:
                q.popleft()
        w = choose(j, t, [len(q) for q in ahead])
        s = max(t, last[w])
        start[j], last[w] = s, s + svc[j]
        ahead[w].append(last[w])
    return start


def run(strategy: str, trace: Trace, fleet: Fleet, seed: int = 0) -> Run:
    """One strategy over the whole trace, from an empty, idle fleet."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown dispatch {strategy!r}; use {', '.join(STRATEGIES)}")
    k, nb = fleet.replicas, len(fleet.buckets)
    svc = service_s(trace, fleet)
    bucket = [bucket_index(c, fleet.buckets) for c in trace.costs]
    if strategy == "pull":
        pick = hrrn_pick(trace.times_s, bucket_service_s(bucket, svc, nb), fleet.overdue_factor)
        start = _pull(trace, svc, k, bucket, nb, pick)
    elif strategy == "pull-fifo":
        start = _pull(trace, svc, k, [0] * len(svc), 1, fifo_pick)
    else:
        choose = {
            "round-robin": round_robin(k),
            "least-connections": least_connections(k),
            "power-of-two": power_of_two(k, seed),
        }[strategy]
        start = _push(trace, svc, k, choose)
    finish = [s + d for s, d in zip(start, svc, strict=True)]
    return Run(strategy, trace, fleet, bucket, start, finish)


def offered_utilization(trace: Trace, fleet: Fleet) -> float:
    """Work arriving per second over what the fleet can serve per second."""
    span = trace.duration_s or 1.0
    return sum(trace.costs) / (span * fleet.replicas * fleet.service_rate)
