"""A generative job's admission (ADR 0144): its max_tokens, cost and bucket, or a
clear refusal when it can never fit a slot.

A slot's KV budget is ``generate.max_seq_tokens``: the prompt plus every token
the job may generate must fit it, or the job could never finish and is refused at
submit (:class:`PromptTooLong`, HTTP 422, OpenAI ``context_length_exceeded``).
Without a ``max_tokens`` the job gets ``generate.default_max_tokens``, clipped to
what fits. Its cost is the prompt plus its expected output: learned per model
from finished jobs (the step script's stats, :func:`expected_output`), the config's
prior until one has finished, never above its own ``max_tokens``. The bucket is
the smallest whose bound holds the cost (the largest for a longer job): the claim
is count-limited by free slots (``sluice.generate.ops``), so the bucket only
orders service.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.config import ModelConfig
from sluice.errors import InvalidInput
from sluice.generate.ops import generate_config
from sluice.generate.params import MAX_STOP_SEQUENCES, GenerateInput, SamplingParams
from sluice.jobs import NewJob
from sluice.records import Stat

SEED_LIMIT = 2**31  # an assigned seed is below this (every sampler takes it)


class PromptTooLong(InvalidInput):
    """The prompt plus max_tokens can never fit a slot's KV budget (422)."""

    type = "context_length_exceeded"


@dataclass(frozen=True)
class Admission:
    cost: int
    bucket: str
    max_tokens: int


def _refuse(prompt_tokens: int, max_tokens: int | None, limit: int) -> PromptTooLong:
    if max_tokens is None:
        return PromptTooLong(
            f"this model's maximum context length is {limit} tokens; the prompt has "
            f"{prompt_tokens} tokens, leaving no room for any output (max_tokens)"
        )
    return PromptTooLong(
        f"this model's maximum context length is {limit} tokens; the prompt has "
        f"{prompt_tokens} tokens and max_tokens is {max_tokens} "
        f"({prompt_tokens + max_tokens} in all)"
    )


def bucket_of(cfg: ModelConfig, cost: int) -> str:
    for bound in cfg.buckets:
        if cost <= bound:
            return str(bound)
    return str(cfg.buckets[-1])


def admit(
    cfg: ModelConfig, prompt_tokens: int, max_tokens: int | None, expected_output: float | None
) -> Admission:
    """``max_tokens`` None: the default, clipped to what fits. Raises PromptTooLong
    when prompt + max_tokens exceeds ``max_seq_tokens``, InvalidInput for an empty
    prompt or a max_tokens below 1."""
    g = generate_config(cfg, "this model")
    limit = g.max_seq_tokens
    if prompt_tokens < 1:
        raise InvalidInput("the prompt has no tokens")
    if max_tokens is not None and max_tokens < 1:
        raise InvalidInput(f"max_tokens must be at least 1, got {max_tokens}")
    room = limit - prompt_tokens
    if room < 1 or (max_tokens is not None and max_tokens > room):
        raise _refuse(prompt_tokens, max_tokens, limit)
    allowed = max_tokens if max_tokens is not None else min(g.default_max_tokens, room)
    prior = g.expected_output_tokens if expected_output is None else expected_output
    expected = min(allowed, max(1, math.ceil(prior)))
    cost = prompt_tokens + expected
    return Admission(cost, bucket_of(cfg, cost), allowed)


def expected_output(stats: Mapping[str, Any]) -> float | None:
    """The mean output length of the model's finished jobs (the stats hash as read,
    or ``QueueStats.counters``); None before any has finished."""
    finished = int(stats.get(Stat.GEN_FINISHED, 0) or 0)
    if finished < 1:
        return None
    return int(stats.get(Stat.GEN_OUTPUT_TOKENS, 0) or 0) / finished


def new_job(
    cfg: ModelConfig,
    prompt_ids: Sequence[int],
    *,
    max_tokens: int | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int | None = None,
    stop: Sequence[str] = (),
    expected: float | None = None,
    **job: Any,
) -> NewJob:
    """The queue's NewJob for a prompt (admitted: PromptTooLong when it cannot fit).
    A sampled job with no seed gets one here, so a re-run reproduces what was
    streamed. ``expected``: :func:`expected_output` of the model's stats. ``job``:
    NewJob's other fields (priority, deadline_ms, metadata, idempotency_key,
    webhook, request_hash, id)."""
    if len(stop) > MAX_STOP_SEQUENCES:
        raise InvalidInput(f"stop: at most {MAX_STOP_SEQUENCES} sequences, got {len(stop)}")
    a = admit(cfg, len(prompt_ids), max_tokens, expected)
    if temperature != 0.0 and seed is None:
        seed = secrets.randbelow(SEED_LIMIT)
    sampling = SamplingParams(a.max_tokens, temperature, top_p, top_k, seed, tuple(stop))
    value = GenerateInput(tuple(int(i) for i in prompt_ids), sampling).to_dict()
    return NewJob(input=value, bucket=a.bucket, cost=a.cost, **job)
