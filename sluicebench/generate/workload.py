"""The generate benchmark's requests and arrivals, seeded (pure).

Prompts are token ids drawn uniformly from the vocabulary (above the first
``RESERVED_IDS``, where tokenizers keep their special tokens), 16-256 tokens
long, then made canonical (``canonical``: the text's own encoding, so a server
that tokenizes text sees the same ids as one that takes ids); ``max_tokens`` is
16, 64 or 256 at 50/30/20%. Every system of a run gets the same requests in the
same order. Decoding is greedy and no request names a stop sequence, so a
request's output is exactly ``max_tokens`` long unless the model emits its
end-of-sequence token; the tiny model's greedy outputs for these prompts do not
(measured: docs/benchmarks/generate.md), and the summary counts any request that
came back short, so one would be seen.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

PROMPT_TOKENS = (16, 256)
MAX_TOKENS_MIX = ((16, 0.5), (64, 0.3), (256, 0.2))
RESERVED_IDS = 16


@dataclass(frozen=True, slots=True)
class Request:
    rid: int
    prompt_ids: tuple[int, ...]
    max_tokens: int
    text: str = ""  # the prompt as text, which the tokenizer encodes to prompt_ids


class Codec(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


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


def canonical(reqs: Sequence[Request], codec: Codec) -> list[Request]:
    """Each prompt as text whose encoding is exactly its ids, no longer than drawn.

    Random ids are not what the tokenizer makes of their text (byte-level BPE merges
    across them, or splits a broken character), and a server that takes text (the
    gateway, vLLM) tokenizes it again: so every system gets ``encode(decode(ids))``,
    cut to the length drawn (and made canonical again).
    """
    out = []
    for r in reqs:
        size = len(r.prompt_ids)
        canon = codec.encode(codec.decode(r.prompt_ids))
        for _ in range(10):  # one or two rounds in practice
            cut = canon[:size]
            canon = codec.encode(codec.decode(cut))
            if canon == cut:
                break
        out.append(Request(r.rid, tuple(canon), r.max_tokens, codec.decode(canon)))
    return out


def mean_output_tokens(mix: tuple[tuple[int, float], ...] = MAX_TOKENS_MIX) -> float:
    total = sum(w for _, w in mix)
    return sum(n * w for n, w in mix) / total


def parse_mix(text: str) -> tuple[tuple[int, float], ...]:
    """``16:0.5,64:0.3,256:0.2`` -> ((16, 0.5), (64, 0.3), (256, 0.2))."""
    out = []
    for part in text.split(","):
        n, _, w = part.partition(":")
        out.append((int(n), float(w or 1)))
    if not out or any(n < 1 or w <= 0 for n, w in out):
        raise ValueError(f"mix {text!r}: MAX_TOKENS:WEIGHT,... with both above 0")
    return tuple(out)


MIN_ARRIVALS = 20  # an open loop at a low rate runs longer rather than measure a handful


def arrivals(rate: float, duration_s: float, seed: int, limit: int) -> list[float]:
    """Poisson arrival offsets (s) at ``rate``/s for ``duration_s`` (longer when that
    would expect fewer than MIN_ARRIVALS), at most ``limit``."""
    if rate <= 0:
        return []
    duration_s = max(duration_s, MIN_ARRIVALS / rate)
    rng = random.Random(seed + 1)
    at, out = 0.0, list[float]()
    while len(out) < limit:
        at += rng.expovariate(rate)
        if at >= duration_s:
            break
        out.append(at)
    return out
