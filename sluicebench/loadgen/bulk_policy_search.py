"""A wide search of bulk policies in the discrete-event model (ADR 0164).

Runs every policy of a grid (bulk batch, micro-batch, idle reserve, a reserve
that follows the arrival rate, a quiet time before bulk, interactive jobs
joining a bulk call, aborting a bulk call) on the same seeded arrivals as the
run without bulk, and prints each one's p99 ratio (per seed), bulk's share of
the idle capacity (the benchmark's definition: bulk jobs/s over 250.7 x 0.4),
its share of the idle *time* (bulk jobs/s over 250.7 x (1 - busy without
bulk)), the interactive batch, and which meet both targets.

    python -m sluicebench.loadgen.bulk_policy_search [--seconds 100] [--seeds 2]
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterator

from sluicebench.loadgen.bulk_yield_sim import (
    CAPACITY_PER_S,
    IDLE_PER_S,
    MAX_BATCH,
    WORKERS,
    Policy,
    batch_ms,
    simulate,
)

P99_MAX, SHARE_MIN = 1.10, 0.85


def grid() -> Iterator[Policy]:
    for bulk, micro in ((1, 0), (2, 0), (4, 0), (8, 0), (8, 1), (8, 2), (8, 4), (4, 1), (2, 1)):
        for reserve in (0, 1, 2):
            yield Policy(bulk, micro, reserve)
            if micro:
                yield Policy(bulk, micro, reserve, join=True)
            yield Policy(bulk, micro, reserve, abort=True)
        for window, arrivals in ((20, 3), (20, 4), (40, 5), (40, 7)):
            for hi in (1, 2):
                yield Policy(bulk, micro, 0, hi, window, arrivals)
        for quiet in (5, 10, 20):
            yield Policy(bulk, micro, quiet_ms=quiet)


def describe(p: Policy) -> str:
    out = [f"bulk {p.bulk}"] + ([f"micro {p.micro}"] if p.micro else [])
    if p.busy_reserve:
        dense = f"{p.busy_arrivals}/{p.busy_window_ms:g}ms"
        out.append(f"reserve {p.idle_reserve}->{p.busy_reserve} at >={dense}")
    elif p.idle_reserve:
        out.append(f"idle reserve {p.idle_reserve}")
    if p.quiet_ms:
        out.append(f"quiet {p.quiet_ms:g}ms")
    out += ["join"] * p.join + ["abort (bound)"] * p.abort
    return ", ".join(out)


def bound(seconds: float, seeds: range) -> None:
    """The most bulk could get with a perfect preemption (instant, free, no work
    lost: bulk takes every idle moment in full batches and interactive jobs never
    see it), for interactive batching as it is and made bigger on purpose (a lone
    job held up to ``hold_ms`` for a second). What it costs p99 is interactive-only."""
    per_item_ms = batch_ms(MAX_BATCH) / MAX_BATCH
    base = [simulate(Policy(), seconds, s) for s in seeds]
    print("| lone interactive job held | p99 ratio (per seed) | busy | bulk's ceiling (of idle) |")
    print("| --- | ---: | ---: | ---: |")
    for hold in (0.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0):
        runs = [simulate(Policy(hold_ms=hold), seconds, s) for s in seeds]
        ratios = ", ".join(
            f"{r['p99_ms'] / b['p99_ms']:.2f}" for r, b in zip(runs, base, strict=True)
        )
        busy = sum(r["busy"] for r in runs) / len(runs)
        ceiling = WORKERS * (1 - busy) * 1000 / per_item_ms / IDLE_PER_S
        print(f"| {hold:g} ms | {ratios} | {busy:.3f} | {ceiling:.2f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=100.0)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--bound", action="store_true", help="only the perfect-preemption bound")
    a = ap.parse_args()
    seeds = range(1, a.seeds + 1)
    if a.bound:
        bound(a.seconds, seeds)
        return
    base = [simulate(Policy(), a.seconds, s) for s in seeds]
    busy = sum(b["busy"] for b in base) / len(base)
    p99s = ", ".join(f"{b['p99_ms']:.1f}" for b in base)
    print(f"without bulk: p99 {p99s} ms, busy {busy:.3f}")
    print("| policy | p99 ratio (per seed) | share of idle | of idle time | batch | both |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for pol in itertools.chain(grid()):
        runs = [simulate(pol, a.seconds, s) for s in seeds]
        ratios = [r["p99_ms"] / b["p99_ms"] for r, b in zip(runs, base, strict=True)]
        share = sum(r["share_of_idle"] for r in runs) / len(runs)
        per_s = sum(r["bulk_per_s"] for r in runs) / len(runs)
        of_time = per_s / (CAPACITY_PER_S * (1 - busy))
        batch = sum(r["interactive_batch"] for r in runs) / len(runs)
        ok = max(ratios) <= P99_MAX and share >= SHARE_MIN
        print(
            f"| {describe(pol)} | {', '.join(f'{x:.2f}' for x in ratios)} | {share:.2f} "
            f"| {of_time:.2f} | {batch:.2f} | {'yes' if ok else ''} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
