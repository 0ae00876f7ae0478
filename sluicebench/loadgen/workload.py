"""What a load generator sends, and when: pure functions of a seeded RNG.

The default workload is mixed-length text, the case size buckets exist for:
most requests are short, a quarter are medium and a few are long. Arrivals are
open loop (a Poisson process, or a trace's timestamps) or closed loop (the
driver keeps C jobs outstanding), so nothing here knows about HTTP.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sluice.errors import ConfigError
from sluice.tracefile import read_trace_csv

# Common short English words: a tokenizer maps most of them to one token, so a
# text of n words costs about n tokens whichever cost method the model uses.
WORDS: tuple[str, ...] = tuple(
    "the of and to in is it you that he was for on are with as his they be at one have "
    "this from or had by hot word but what some we can out other were all there when up "
    "use your how said an each she which do their time if will way about many then them "
    "write would like so these her long make thing see him two has look more day could go "
    "come did number sound no most people my over know water than call first who may down "
    "side been now find any new work part take get place made live where after back little "
    "only round man year came show every good me give our under name very through just form "
    "great think say help low line differ turn cause much mean before move right boy old too "
    "same tell does set three want air well also play small end put home read hand port large "
    "spell add even land here must big high such follow act why ask men change went light".split()
)


@dataclass(frozen=True, slots=True)
class LengthBand:
    """Inputs of ``lo..hi`` words (inclusive), drawn with probability ``weight``."""

    lo: int
    hi: int
    weight: float


# About 70% short (5-20 words), 25% medium (40-100), 5% long (200-300).
MIXED: tuple[LengthBand, ...] = (
    LengthBand(5, 20, 0.70),
    LengthBand(40, 100, 0.25),
    LengthBand(200, 300, 0.05),
)


def text_of(n_words: int, rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(1, n_words)))


def draw_length(rng: random.Random, bands: Sequence[LengthBand] = MIXED) -> int:
    """A word count: pick a band by weight, then a length uniformly inside it."""
    band = rng.choices(bands, weights=[b.weight for b in bands])[0]
    return rng.randint(band.lo, band.hi)


def parse_mix(spec: str) -> tuple[LengthBand, ...]:
    """``"5-20:0.7,40-100:0.25,200-300:0.05"`` (or ``"10:0.9,100:0.1"``) as bands."""
    bands = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        try:
            span, _, weight = part.partition(":")
            lo, _, hi = span.partition("-")
            band = LengthBand(int(lo), int(hi or lo), float(weight or 1.0))
        except ValueError as e:
            raise ConfigError(f"mix {spec!r}: expected LO-HI:WEIGHT items, got {part!r}") from e
        if band.lo < 1 or band.hi < band.lo or band.weight <= 0:
            raise ConfigError(f"mix {spec!r}: need 1 <= LO <= HI and WEIGHT > 0 in {part!r}")
        bands.append(band)
    if not bands:
        raise ConfigError("mix: at least one LO-HI:WEIGHT item is needed")
    return tuple(bands)


class Workload:
    """Draws inputs one at a time (a closed loop asks for the next when a job ends)."""

    def __init__(self, bands: Sequence[LengthBand] = MIXED, seed: int = 1) -> None:
        self.bands = tuple(bands)
        self.rng = random.Random(seed)

    def next_input(self) -> str:
        return text_of(draw_length(self.rng, self.bands), self.rng)


def poisson_arrivals(
    rate_per_s: float,
    rng: random.Random,
    *,
    duration_s: float | None = None,
    max_jobs: int | None = None,
) -> list[float]:
    """Arrival offsets (s) of a Poisson process: exponential gaps of mean 1/rate.

    Stops at ``duration_s`` or after ``max_jobs`` arrivals, whichever comes first.
    """
    if rate_per_s <= 0:
        raise ConfigError(f"rate must be > 0 jobs/s, got {rate_per_s}")
    if duration_s is None and max_jobs is None:
        raise ConfigError("an open loop needs a duration or a job count")
    out: list[float] = []
    t = 0.0
    while max_jobs is None or len(out) < max_jobs:
        t += rng.expovariate(rate_per_s)
        if duration_s is not None and t >= duration_s:
            break
        out.append(t)
    return out


@dataclass(frozen=True, slots=True)
class Arrival:
    at_s: float
    words: int


def load_trace(path: Path) -> list[Arrival]:
    """A CSV with ``time_s`` (or ``t``) and ``cost`` (words) columns, the simulator's format.

    Times are shifted so the first arrival is at 0; rows may come in any order.
    """
    return [Arrival(t, max(1, round(c))) for t, c in read_trace_csv(path)]
