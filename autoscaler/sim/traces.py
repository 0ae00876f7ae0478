"""Traffic traces for the simulator: built-in shapes and CSV files.

A trace is a list of arrivals (time in seconds, cost in the model's units). The
built-in shapes also keep their true rate function, which is what the oracle
provisions for. Every built-in is seeded, so a run is reproducible.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from sluice.errors import ConfigError
from sluice.tracefile import read_trace_csv

BUILTIN = ("step", "spike", "diurnal", "noisy", "mixed", "workday", "from-idle")
COST_MIN, COST_MAX = 8, 512  # log-uniform job costs (tokens): mean about 121


@dataclass(frozen=True)
class Trace:
    name: str
    times_s: list[float]
    costs: list[float]
    duration_s: float
    rate_jobs: Callable[[float], float] | None = None  # true rate, when known
    mean_cost: float = 0.0


def _mean_cost() -> float:
    # E[floor(exp(U))] is close to E[exp(U)] - 0.5 over this range.
    a, b = math.log(COST_MIN), math.log(COST_MAX)
    return (COST_MAX - COST_MIN) / (b - a) - 0.5


def poisson(
    name: str, rate: Callable[[float], float], peak: float, duration_s: float, seed: int
) -> Trace:
    """A non-homogeneous Poisson process by thinning (rate <= peak jobs/s).

    ``rng.expovariate(peak)`` and a log-uniform cost written out (the arithmetic of
    ``random.Random``'s own, on the same draws): a 15-minute trace is some 30,000 draws, and
    the policy properties build dozens of them."""
    rng = random.Random(seed)
    draw, log, exp = rng.random, math.log, math.exp
    lo, hi = math.log(COST_MIN), math.log(COST_MAX)
    times, costs, t = [], [], 0.0
    while True:
        t += -log(1.0 - draw()) / peak
        if t >= duration_s:
            break
        if draw() * peak <= rate(t):
            times.append(t)
            costs.append(float(int(exp(lo + (hi - lo) * draw()))))
    return Trace(name, times, costs, duration_s, rate, _mean_cost())


def step(
    base: float = 30.0,
    factor: float = 2.0,
    at_s: float = 600.0,
    duration_s: float = 1800.0,
    seed: int = 1,
) -> Trace:
    """Load doubles at 10 min and stays."""
    return poisson(
        "step", lambda t: base * (factor if t >= at_s else 1.0), base * factor, duration_s, seed
    )


def spike(
    base: float = 30.0,
    factor: float = 3.0,
    at_s: float = 600.0,
    length_s: float = 60.0,
    duration_s: float = 1800.0,
    seed: int = 2,
) -> Trace:
    """A 60 s burst at three times the base rate."""
    return poisson(
        "spike",
        lambda t: base * (factor if at_s <= t < at_s + length_s else 1.0),
        base * factor,
        duration_s,
        seed,
    )


def diurnal(
    peak: float = 40.0, trough_share: float = 0.1, duration_s: float = 3600.0, seed: int = 3
) -> Trace:
    """A day compressed into an hour: trough at both ends, peak in the middle."""
    lo = trough_share

    def rate(t: float) -> float:
        return peak * (lo + (1 - lo) * 0.5 * (1 - math.cos(2 * math.pi * t / duration_s)))

    return poisson("diurnal", rate, peak, duration_s, seed)


def noisy(
    base: float = 30.0,
    noise: float = 0.2,
    change_s: float = 10.0,
    duration_s: float = 1800.0,
    seed: int = 4,
) -> Trace:
    """Steady on average; the rate jumps by up to +-20% every 10 s on top of Poisson noise."""
    rng = random.Random(seed * 7919)
    n = int(duration_s / change_s) + 1
    levels = [base * (1 + rng.uniform(-noise, noise)) for _ in range(n)]

    def rate(t: float) -> float:
        return levels[min(int(t / change_s), n - 1)]

    return poisson("noisy", rate, base * (1 + noise), duration_s, seed)


WORKDAY_BURSTS_S = ((540.0, 120.0), (1320.0, 60.0), (2100.0, 90.0), (2880.0, 60.0))


def workday(
    peak: float = 30.0,
    factor: float = 2.0,
    trough_share: float = 0.25,
    duration_s: float = 3600.0,
    seed: int = 6,
) -> Trace:
    """A working day compressed into an hour: the rate climbs from a quarter of its peak
    to the peak and back (cosine), with four bursts at ``factor`` times the rate of the
    moment (60-120 s each, at 9, 22, 35 and 48 minutes): the ramp a predictive term can
    see coming, the bursts it cannot."""
    lo = trough_share

    def rate(t: float) -> float:
        base = peak * (lo + (1 - lo) * 0.5 * (1 - math.cos(2 * math.pi * t / duration_s)))
        burst = any(at <= t < at + length for at, length in WORKDAY_BURSTS_S)
        return base * (factor if burst else 1.0)

    return poisson("workday", rate, peak * factor, duration_s, seed)


def from_idle(
    rate: float = 24.0,
    idle_s: float = 300.0,
    burst_s: float = 300.0,
    cycles: int = 4,
    seed: int = 7,
) -> Trace:
    """Traffic that starts from idle, again and again: nothing for ``idle_s`` (5 min),
    then ``rate`` jobs/s for ``burst_s`` (5 min; at 24 jobs/s about 4.5 replicas'
    worth at the 0.65 target), four times (docs/adr/0157)."""
    cycle = idle_s + burst_s

    def r(t: float) -> float:
        return rate if t % cycle >= idle_s else 0.0

    return poisson("from-idle", r, rate, cycle * cycles, seed)


def mixed(
    rate: float = 80.0,
    duration_s: float = 1800.0,
    short_cost: float = 24.0,
    long_factor: float = 10.0,
    long_share: float = 0.1,
    seed: int = 5,
) -> Trace:
    """Steady Poisson arrivals of two sizes: 90% short jobs, 10% ten times longer
    (the dispatch benchmark's load; 24 and 240 units land in buckets 32 and 512)."""
    rng = random.Random(seed)
    times, costs, t = [], [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration_s:
            break
        times.append(t)
        costs.append(short_cost * long_factor if rng.random() < long_share else short_cost)
    mean = short_cost * (1 - long_share + long_share * long_factor)
    return Trace("mixed", times, costs, duration_s, lambda _t: rate, mean)


def builtin(name: str, factor: float | None = None, seed: int | None = None) -> Trace:
    """A built-in shape; ``factor`` is the step's or spike's multiple, the diurnal
    peak-to-trough ratio's inverse share, the noisy trace's +-share, the mixed
    trace's rate in jobs/s, the workday's burst multiple, or the from-idle trace's
    burst rate in jobs/s. ``seed``: another draw of the same shape (None: its own)."""
    s = {} if seed is None else {"seed": seed}
    if name == "step":
        return step(factor=factor or 2.0, **s)
    if name == "spike":
        return spike(factor=factor or 3.0, **s)
    if name == "diurnal":
        return diurnal(trough_share=factor or 0.1, **s)
    if name == "mixed":
        return mixed(rate=factor or 80.0, **s)
    if name == "workday":
        return workday(factor=factor or 2.0, **s)
    if name == "from-idle":
        return from_idle(rate=factor or 24.0, **s)
    return noisy(noise=factor or 0.2, **s)


def load_csv(path: Path) -> Trace:
    """CSV with a header naming ``time_s`` (or ``t``) and ``cost`` columns; rows in any order."""
    pairs = read_trace_csv(path)
    times = [t for t, _ in pairs]
    costs = [c for _, c in pairs]
    return Trace(path.stem, times, costs, times[-1] + 1.0, None, sum(costs) / len(costs))


def resolve(spec: str, seed: int | None = None) -> Trace:
    """``step``, ``spike:1.5`` (a built-in and its factor) or a CSV path; ``seed``:
    another draw of a built-in shape."""
    name, _, arg = spec.partition(":")
    if name in BUILTIN:
        try:
            factor = float(arg) if arg else None
        except ValueError as e:
            raise ConfigError(f"trace {spec!r}: factor must be a number") from e
        if factor is not None and factor <= 0:
            raise ConfigError(f"trace {spec!r}: factor must be > 0")
        trace = builtin(name, factor, seed)
        return replace(trace, name=spec)
    return load_csv(Path(spec))
