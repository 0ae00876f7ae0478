"""Choosing each sequence's next token from its logits.

Greedy rows take the argmax together (one op for the batch). A sampled row is
drawn alone with its own ``torch.Generator`` seeded from the job's seed, so its
draws depend on nothing else in the batch: the same job run again (after a
worker died) draws the same tokens whatever company it keeps. Temperature, then
top-k, then top-p (nucleus) cut, as transformers' sampling does; the arithmetic
is in float32 at least, whatever the model's dtype.
"""

from __future__ import annotations

import torch

from sluice.generate.params import SamplingParams


def make_generator(params: SamplingParams, device: torch.device) -> torch.Generator | None:
    """The sequence's own generator (None when greedy). A job without a seed gets
    one at submit (ADR 0144); a missing seed here draws from entropy."""
    if params.greedy:
        return None
    gen = torch.Generator(device=device)
    if params.seed is None:
        gen.seed()
    else:
        gen.manual_seed(params.seed & 0xFFFF_FFFF_FFFF_FFFF)
    return gen


def choose(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
) -> list[int]:
    """The next token of each row of ``logits`` [rows, vocab]."""
    greedy = logits.argmax(dim=-1).tolist()
    out: list[int] = []
    for i, p in enumerate(params):
        gen = generators[i]
        if p.greedy or gen is None:
            out.append(int(greedy[i]))
        else:
            out.append(sample_row(logits[i], p, gen))
    return out


def sample_row(row: torch.Tensor, params: SamplingParams, gen: torch.Generator) -> int:
    x = row.to(torch.float64 if row.dtype == torch.float64 else torch.float32)
    x = x / params.temperature
    if params.top_k > 0 and params.top_k < x.shape[-1]:
        kth = torch.topk(x, params.top_k).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_x, order = torch.sort(x, descending=True)
        probs = torch.softmax(sorted_x, dim=-1)
        # drop a token once the mass before it already reaches top_p (the first
        # token always stays)
        drop = (torch.cumsum(probs, dim=-1) - probs) >= params.top_p
        x = x.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    probs = torch.softmax(x, dim=-1)
    return int(torch.multinomial(probs, 1, generator=gen).item())
