"""A discrete-event model of `sluice bench bulk` (ADR 0155), for the settings the
benchmark cannot measure cleanly on a shared machine, or that are not built.

4 workers; interactive jobs arrive Poisson at 150/s into one FIFO queue; a batch
of n takes 5 + 15 n ms (the benchmark's synthetic model), at most 8 a batch; a
claim takes 1 ms; end-to-end latency adds 5 ms (the gateway and client). Bulk is
an endless backlog. A free worker claims interactive jobs if any wait, else a
bulk batch of ``bulk`` items (if the policy allows), run as calls of ``micro``
items; between calls it gives the rest back if an interactive job waits.
``idle_reserve``: bulk only while that many other workers are idle (not built).
No noise, no Redis, no Python: a lower bound on what each setting costs.

    python -m sluicebench.loadgen.bulk_yield_sim
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass

WORKERS, RATE_PER_S, MAX_BATCH = 4, 150.0, 8
BASE_MS, ITEM_MS, CLAIM_MS, OVERHEAD_MS, PROBE_MS = 5.0, 15.0, 1.0, 5.0, 0.3
IDLE_PER_S = 250.7 * 0.4  # the benchmark's idle capacity: capacity x (1 - utilisation)


@dataclass(frozen=True)
class Policy:
    bulk: int = 0  # bulk.max_batch; 0: no bulk job
    micro: int = 0  # bulk.micro_batch; 0: a bulk batch is one call
    idle_reserve: int = 0


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
        self.lat: list[float] = []
        self.batches: list[int] = []
        self.bulk_done = 0

    def push(self, at: float, kind: str, w: int) -> None:
        heapq.heappush(self.events, (at, next(self.seq), kind, w))

    def claim(self, w: int, now: float) -> None:
        self.state[w] = "claiming"
        self.push(now + CLAIM_MS, "claimed", w)

    def call(self, w: int, now: float) -> None:
        k = min(self.pol.micro or self.pol.bulk, self.left[w])
        self.left[w] -= k
        self.push(now + BASE_MS + ITEM_MS * k, "bulk", w * 1000 + k)

    def decide(self, w: int, now: float) -> None:
        if self.queue:
            n = min(MAX_BATCH, len(self.queue))
            end = now + BASE_MS + ITEM_MS * n
            self.lat.extend(end - a + OVERHEAD_MS for a in self.queue[:n])
            self.batches.append(n)
            del self.queue[:n]
            self.state[w] = "busy"
            self.push(end, "free", w)
            return
        idle = sum(1 for i in range(WORKERS) if i != w and self.state[i] == "idle")
        if self.pol.bulk and idle >= self.pol.idle_reserve:
            self.state[w], self.left[w] = "bulk", self.pol.bulk
            self.call(w, now)
            return
        self.state[w] = "idle"

    def bulk_call_done(self, x: int, now: float) -> None:
        w, k = divmod(x, 1000)
        self.bulk_done += k
        if self.left[w] and not (self.pol.micro and self.queue):
            self.call(w, now + (PROBE_MS if self.pol.micro else 0.0))
        else:
            self.left[w] = 0
            self.claim(w, now)

    def run(self) -> None:
        while self.events:
            now, _, kind, x = heapq.heappop(self.events)
            if now > self.end_ms:
                return
            if kind == "arrive":
                self.queue.append(now)
                idle = [i for i in range(WORKERS) if self.state[i] == "idle"]
                if idle:
                    self.claim(idle[0], now)
            elif kind == "claimed":
                self.decide(x, now)
            elif kind == "free":
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
