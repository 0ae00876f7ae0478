"""The generate benchmark's requests and arrivals, seeded (pure).

Prompts are token ids drawn uniformly from the vocabulary (above the first
``RESERVED_IDS``, where tokenizers keep their special tokens), 16-256 tokens
long; ``max_tokens`` is 16, 64 or 256 at 50/30/20%. Every system of a run gets
the same requests in the same order. Decoding is greedy and no request names a
stop sequence, so every request's output is exactly ``max_tokens`` long as long
as the model never emits its end-of-sequence token: ``systems`` builds the
benchmark's copy of the model with no end-of-sequence id (the same weights), and
the summary counts any request that came back short, so a short one is seen.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

PROMPT_TOKENS = (16, 256)
MAX_TOKENS_MIX = ((16, 0.5), (64, 0.3), (256, 0.2))
RESERVED_IDS = 16


@dataclass(frozen=True, slots=True)
class Request:
    rid: int
    prompt_ids: tuple[int, ...]
    max_tokens: int


def requests(
    n: int,
    seed: int,
    vocab: int,
    prompt_tokens: tuple[int, int] = PROMPT_TOKENS,
    mix: tuple[tuple[int, float], ...] = MAX_TOKENS_MIX,
) -> list[Request]:
    """``n`` requests, the same for a seed (and different for another)."""
    rng = random.Random(seed)
    lengths, weights = zip(*mix, strict=True)
    out = []
    for rid in range(n):
        size = rng.randint(*prompt_tokens)
        prompt = tuple(rng.randrange(RESERVED_IDS, vocab) for _ in range(size))
        out.append(Request(rid, prompt, rng.choices(lengths, weights=weights)[0]))
    return out


def mean_output_tokens(mix: tuple[tuple[int, float], ...] = MAX_TOKENS_MIX) -> float:
    total = sum(w for _, w in mix)
    return sum(n * w for n, w in mix) / total


def arrivals(rate: float, duration_s: float, seed: int, limit: int) -> list[float]:
    """Poisson arrival offsets (s) at ``rate``/s for ``duration_s``, at most ``limit``."""
    if rate <= 0:
        return []
    rng = random.Random(seed + 1)
    at, out = 0.0, []
    while len(out) < limit:
        at += rng.expovariate(rate)
        if at >= duration_s:
            break
        out.append(at)
    return out
