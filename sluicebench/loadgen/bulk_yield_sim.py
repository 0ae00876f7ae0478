"""A discrete-event model of `sluice bench bulk` (ADRs 0155, 0164), for the settings
the benchmark cannot measure cleanly on a shared machine, or that are not built.

4 workers; interactive jobs arrive Poisson at 150/s into one FIFO queue; a batch
of n takes 5 + 15 n ms (the benchmark's synthetic model), at most 8 a batch; a
claim takes 1 ms; end-to-end latency adds 5 ms (the gateway and client). Bulk is
an endless backlog. A free worker claims interactive jobs if any wait, else a
bulk batch of ``bulk`` items (if the policy allows), run as calls of ``micro``
items; between calls it gives the rest back if an interactive job waits.
No noise, no Redis, no Python: a lower bound on what each setting costs.

The policy's other knobs (ADR 0164 searched them; `bulk_policy_search`):
``idle_reserve``: bulk only while that many *other* workers hold no batch at all
(`bulk.idle_reserve`, built); ``busy_reserve``: the same, raised to that count
while ``busy_window_ms`` saw ``busy_arrivals`` interactive arrivals or more (a
reserve that follows the arrival rate); ``quiet_ms``: bulk only when no
interactive job arrived for that long; ``join``: at a micro-batch boundary the
waiting interactive jobs join the bulk call instead of the worker yielding
(interactive first, topped up with bulk to ``micro`` items); ``hold_ms``: a
worker that finds one interactive job waiting lets it wait that long for a
second (bigger interactive batches, fewer per-call costs: the only way bulk can
pass 0.76 of the idle capacity here); ``abort``: an
interactive arrival that finds no idle worker stops a running bulk call at once,
its work lost (a bound: a GPU forward pass cannot be stopped like the synthetic
sleep).

    python -m sluicebench.loadgen.bulk_yield_sim
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from dataclasses import dataclass

WORKERS, RATE_PER_S, MAX_BATCH = 4, 150.0, 8
BASE_MS, ITEM_MS, CLAIM_MS, OVERHEAD_MS, PROBE_MS = 5.0, 15.0, 1.0, 5.0, 0.3
CAPACITY_PER_S = 250.7  # the benchmark's measured capacity (`--capacity`)
IDLE_PER_S = CAPACITY_PER_S * 0.4  # its idle capacity: capacity x (1 - utilisation)


@dataclass(frozen=True)
class Policy:
    bulk: int = 0  # bulk.max_batch; 0: no bulk job
    micro: int = 0  # bulk.micro_batch; 0: a bulk batch is one call
    idle_reserve: int = 0
    busy_reserve: int = 0  # the reserve while arrivals are dense (0: idle_reserve)
    busy_window_ms: float = 0.0
    busy_arrivals: int = 0
    quiet_ms: float = 0.0
    join: bool = False
    abort: bool = False
    hold_ms: float = 0.0  # a lone waiting interactive job waits this long for a second


def batch_ms(n: int) -> float:
    return BASE_MS + ITEM_MS * n


class _Sim:
    """One run: the event heap, the interactive queue, the workers' states."""

    def __init__(self, pol: Policy, seconds: float, seed: int) -> None:
        self.pol, self.end_ms = pol, seconds * 1000
        self.seq = itertools.count()
        self.events: list[tuple[float, int, str, int]] = []
        rng, t = random.Random(seed), 0.0
        while t < self.end_ms:
            t += rng.expovariate(RATE_PER_S / 1000)
            self.push(t, "arrive", -1)
        self.queue: list[float] = []
        self.state, self.left = ["idle"] * WORKERS, [0] * WORKERS
        self.gen, self.call_end = [0] * WORKERS, [0.0] * WORKERS
        self.recent: deque[float] = deque()
        self.last_arrival = -1e9
        self.lat: list[float] = []
        self.batches: list[int] = []
        self.bulk_done, self.busy_ms = 0, 0.0

    def push(self, at: float, kind: str, w: int) -> None:
        heapq.heappush(self.events, (at, next(self.seq), kind, w))

    def claim(self, w: int, now: float) -> None:
        self.state[w] = "claiming"
        self.push(now + CLAIM_MS, "claimed", w)

    def call(self, w: int, now: float, interactive: list[float] | None = None) -> None:
        jobs = interactive or []
        room = (self.pol.micro or self.pol.bulk) - len(jobs)
        k = min(max(room, 0), self.left[w])
        self.left[w] -= k
        end = now + batch_ms(k + len(jobs))
        self.lat.extend(end - a + OVERHEAD_MS for a in jobs)
        self.busy_ms += end - now
        self.state[w], self.call_end[w] = "bulk", end
        self.push(end, "bulk", (w * 1000 + k) * 100 + self.gen[w] % 100)

    def reserve(self, now: float) -> int:
        p = self.pol
        if p.busy_reserve and len(self.recent) >= p.busy_arrivals:
            return p.busy_reserve
        return p.idle_reserve

    def bulk_allowed(self, w: int, now: float) -> bool:
        p = self.pol
        if not p.bulk or now - self.last_arrival < p.quiet_ms:
            return False
        idle = sum(1 for i in range(WORKERS) if i != w and self.state[i] == "idle")
        return idle >= self.reserve(now)

    def decide(self, w: int, now: float) -> None:
        hold = self.pol.hold_ms
        if len(self.queue) == 1 and now - self.queue[0] < hold:
            self.state[w] = "idle"  # wait for a second job, or the hold to pass
            self.push(self.queue[0] + hold, "recheck", w)
        elif self.queue:
            n = min(MAX_BATCH, len(self.queue))
            end = now + batch_ms(n)
            self.lat.extend(end - a + OVERHEAD_MS for a in self.queue[:n])
            self.batches.append(n)
            del self.queue[:n]
            self.busy_ms += end - now
            self.state[w] = "busy"
            self.push(end, "free", w)
        elif self.bulk_allowed(w, now):
            self.left[w] = self.pol.bulk
            self.call(w, now)
        else:
            self.state[w] = "idle"

    def bulk_call_done(self, x: int, now: float) -> None:
        code, gen = divmod(x, 100)
        w, k = divmod(code, 1000)
        if gen != self.gen[w] % 100:
            return  # aborted: its work is lost
        self.bulk_done += k
        p = self.pol
        if self.left[w] and self.queue and p.micro and p.join:
            n = min(MAX_BATCH, len(self.queue))
            jobs = self.queue[:n]
            del self.queue[:n]
            self.batches.append(n)
            self.call(w, now + PROBE_MS + CLAIM_MS, jobs)
        elif self.left[w] and not (p.micro and self.queue):
            self.call(w, now + (PROBE_MS if p.micro else 0.0))
        else:
            self.left[w] = 0
            self.claim(w, now)

    def arrive(self, now: float) -> None:
        self.queue.append(now)
        self.last_arrival = now
        if self.pol.busy_reserve:
            self.recent.append(now)
            while self.recent and self.recent[0] < now - self.pol.busy_window_ms:
                self.recent.popleft()
        idle = [i for i in range(WORKERS) if self.state[i] == "idle"]
        if idle:
            self.claim(idle[0], now)
        elif self.pol.abort and len(self.queue) > sum(s == "claiming" for s in self.state):
            running = [i for i in range(WORKERS) if self.state[i] == "bulk"]
            if running:
                w = max(running, key=lambda i: self.call_end[i])
                self.busy_ms -= self.call_end[w] - now
                self.gen[w] += 1
                self.left[w] = 0
                self.claim(w, now)

    def run(self) -> None:
        while self.events:
            now, _, kind, x = heapq.heappop(self.events)
            if now > self.end_ms:
                return
            if kind == "arrive":
                self.arrive(now)
            elif kind == "claimed":
                self.decide(x, now)
            elif kind == "free":
                self.claim(x, now)
            elif kind == "recheck":
                if self.state[x] == "idle" and self.queue:
                    self.claim(x, now)
            else:
                self.bulk_call_done(x, now)


def simulate(pol: Policy, seconds: float = 300.0, seed: int = 1) -> dict[str, float]:
    sim = _Sim(pol, seconds, seed)
    sim.run()
    lat = sorted(sim.lat)
    return {
        "p50_ms": lat[len(lat) // 2],
        "p99_ms": lat[int(0.99 * len(lat))],
        "bulk_per_s": sim.bulk_done / seconds,
        "share_of_idle": sim.bulk_done / seconds / IDLE_PER_S,
        "busy": sim.busy_ms / (WORKERS * seconds * 1000),
        "interactive_batch": sum(sim.batches) / len(sim.batches),
    }


POLICIES = {
    "no bulk": Policy(),
    "bulk.max_batch 8 (the defaults)": Policy(8),
    "bulk.max_batch 2": Policy(2),
    "bulk.max_batch 1 (sized by time)": Policy(1),
    "bulk.max_batch 8, micro_batch 4": Policy(8, 4),
    "bulk.max_batch 8, micro_batch 2": Policy(8, 2),
    "bulk.max_batch 8, micro_batch 1": Policy(8, 1),
    "bulk.max_batch 8, idle reserve 1": Policy(8, 0, 1),
    "bulk.max_batch 8, micro_batch 1, idle reserve 1": Policy(8, 1, 1),
    "bulk.max_batch 4, micro_batch 1, idle reserve 1": Policy(4, 1, 1),
}


def main() -> None:
    seeds = (1, 2, 3)
    base = [simulate(Policy(), seed=s)["p99_ms"] for s in seeds]
    print("| setting | p99 ratio (3 seeds) | share of idle | interactive batch |")
    print("| --- | ---: | ---: | ---: |")
    for name, pol in POLICIES.items():
        runs = [simulate(pol, seed=s) for s in seeds]
        ratios = ", ".join(f"{r['p99_ms'] / b:.2f}" for r, b in zip(runs, base, strict=True))
        share = sum(r["share_of_idle"] for r in runs) / len(runs)
        batch = sum(r["interactive_batch"] for r in runs) / len(runs)
        print(f"| {name} | {ratios} | {share:.2f} | {batch:.2f} |")


if __name__ == "__main__":
    main()
