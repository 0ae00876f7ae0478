"""Generative submits (ADR 0144, 0148): a request's prompt and sampling, tokenized,
admitted and turned into the job's ``GenerateInput``.

``gateway.service.submit`` calls :func:`prepare` for a model with a ``generate:``
section instead of its cost estimator, so priorities, deadlines, API keys,
idempotency, webhooks and the queue limits (429) apply to generative jobs
unchanged. The prompt codec (tokenizer and chat template, no torch) loads once
per model per gateway process, on the first request that needs it, in a thread.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sluice.config import ModelConfig
from sluice.config.generate import GenerateConfig
from sluice.cost import Estimate
from sluice.errors import InvalidInput
from sluice.generate.params import MAX_STOP_SEQUENCES, GenerateInput, SamplingParams

OFFLOAD_TEXT_CHARS = 16_384  # longer prompts are tokenized in a worker thread
SEED_RANGE = 2**31  # a seed given at submit to a sampled job without one


class PromptTooLong(InvalidInput):
    """The prompt plus max_tokens can never fit a slot (422; OpenAI's 400
    ``context_length_exceeded``)."""

    type = "context_length_exceeded"


class Codec(Protocol):
    """What the gateway needs of ``sluice.generate.prompt.PromptCodec``."""

    def encode(self, text: str) -> list[int]: ...

    def chat(self, messages: list[dict[str, Any]]) -> list[int]: ...


def load_codec(cfg: ModelConfig) -> Codec:
    """The model's prompt codec (tokenizer files only; never torch)."""
    from sluice.generate.prompt import PromptCodec

    codec: Codec = PromptCodec.for_model(cfg)
    return codec


class Codecs:
    """One codec per generative model of this process, loaded on first use."""

    def __init__(self, loader: Callable[[ModelConfig], Codec] = load_codec) -> None:
        self.loader = loader
        self._codecs: dict[str, Codec] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, model: str, cfg: ModelConfig) -> Codec:
        codec = self._codecs.get(model)
        if codec is not None:
            return codec
        async with self._locks.setdefault(model, asyncio.Lock()):
            codec = self._codecs.get(model)
            if codec is None:
                codec = self._codecs[model] = await asyncio.to_thread(self.loader, cfg)
        return codec


class GenerateRequest(BaseModel):
    """A generative job's ``input`` (POST /v1/models/{model}/jobs, batch, predict)."""

    model_config = ConfigDict(extra="forbid")

    prompt: str | None = Field(None, min_length=1, description="Text to continue.")
    messages: list[dict[str, Any]] | None = Field(
        None, min_length=1, description="Chat messages ({role, content}), templated by the model."
    )
    max_tokens: int | None = Field(None, gt=0, strict=True)
    temperature: float = Field(1.0, ge=0, le=2, allow_inf_nan=False)
    top_p: float = Field(1.0, gt=0, le=1, allow_inf_nan=False)
    top_k: int = Field(0, ge=0, strict=True)
    seed: int | None = Field(None, ge=0, lt=2**63, strict=True)
    stop: str | list[str] | None = None

    @model_validator(mode="after")
    def _one_prompt(self) -> GenerateRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("send exactly one of 'prompt' (text) and 'messages' (chat)")
        stop_sequences(self.stop)
        return self


def stop_sequences(stop: str | list[str] | None) -> tuple[str, ...]:
    """``stop`` as a tuple: a string or up to four non-empty strings."""
    items = [] if stop is None else [stop] if isinstance(stop, str) else list(stop)
    if len(items) > MAX_STOP_SEQUENCES:
        raise ValueError(f"stop: {len(items)} sequences, the limit is {MAX_STOP_SEQUENCES}")
    if any(not s for s in items):
        raise ValueError("stop: sequences must not be empty")
    return tuple(items)


def parse_input(value: Any, where: str = "input") -> GenerateRequest:
    """A generative job's input, or InvalidInput naming the first field at fault."""
    if not isinstance(value, dict):
        raise InvalidInput(
            f"{where}: a generative model takes an object with 'prompt' or 'messages' "
            "(and max_tokens, temperature, top_p, top_k, seed, stop)"
        )
    try:
        return GenerateRequest.model_validate(value)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        raise InvalidInput(f"{where}.{loc}: {msg}" if loc else f"{where}: {msg}") from None


@dataclass(frozen=True, slots=True)
class Prepared:
    """One admitted generative input: what the job stores and what it costs."""

    input: GenerateInput
    estimate: Estimate


def _tokenize(codec: Codec, req: GenerateRequest) -> list[int]:
    try:
        if req.messages is not None:
            return list(codec.chat(req.messages))
        return list(codec.encode(req.prompt or ""))
    except ValueError as e:
        raise InvalidInput(f"messages: {e}" if req.messages is not None else str(e)) from e


def _bucket(cfg: ModelConfig, cost: int) -> str:
    for bound in cfg.buckets:
        if cost <= bound:
            return str(bound)
    return str(cfg.buckets[-1])


def admit(
    cfg: ModelConfig, gen: GenerateConfig, prompt_ids: list[int], req: GenerateRequest
) -> Prepared:
    """max_tokens (the request's, else the default clipped to what fits), the cost
    (prompt + expected output, never above max_tokens), and the seed of a sampled job."""
    prompt = len(prompt_ids)
    room = gen.max_seq_tokens - prompt
    max_tokens = req.max_tokens if req.max_tokens is not None else min(gen.default_max_tokens, room)
    if prompt == 0:
        raise InvalidInput("the prompt is empty once tokenized")
    if max_tokens <= 0 or prompt + max_tokens > gen.max_seq_tokens:
        raise PromptTooLong(
            f"the prompt ({prompt} tokens) plus max_tokens ({max(max_tokens, 1)}) is over "
            f"this model's context of {gen.max_seq_tokens} tokens (generate.max_seq_tokens)"
        )
    cost = prompt + min(gen.expected_output_tokens, max_tokens)
    seed = req.seed
    if seed is None and req.temperature > 0:
        seed = secrets.randbelow(SEED_RANGE)  # a re-run after a crash streams the same
    sampling = SamplingParams(
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        seed=seed,
        stop=stop_sequences(req.stop),
    )
    return Prepared(GenerateInput(tuple(prompt_ids), sampling), Estimate(cost, _bucket(cfg, cost)))


def _prepare_each(codec: Codec, cfg: ModelConfig, reqs: list[GenerateRequest]) -> list[Prepared]:
    gen = cfg.generate
    assert gen is not None
    out = []
    for i, req in enumerate(reqs):
        where = f"inputs[{i}]: " if len(reqs) > 1 else "input: "
        try:
            out.append(admit(cfg, gen, _tokenize(codec, req), req))
        except InvalidInput as e:
            raise type(e)(where + str(e)) from e
    return out


async def prepare_requests(
    codecs: Codecs, model: str, cfg: ModelConfig, reqs: list[GenerateRequest]
) -> list[Prepared]:
    """Tokenize and admit validated requests (long prompts off the event loop)."""
    codec = await codecs.get(model, cfg)
    chars = sum(len(r.prompt or "") + len(str(r.messages or "")) for r in reqs)
    if chars > OFFLOAD_TEXT_CHARS:
        return await asyncio.to_thread(_prepare_each, codec, cfg, reqs)
    return _prepare_each(codec, cfg, reqs)


async def prepare(
    codecs: Codecs, model: str, cfg: ModelConfig, inputs: list[Any]
) -> tuple[list[Any], list[Estimate]]:
    """The jobs API's inputs of a generative model as the jobs' stored inputs
    (``GenerateInput.to_dict()``) and their estimates, in order."""
    many = len(inputs) > 1
    reqs = [parse_input(v, f"inputs[{i}]" if many else "input") for i, v in enumerate(inputs)]
    prepared = await prepare_requests(codecs, model, cfg, reqs)
    return [p.input.to_dict() for p in prepared], [p.estimate for p in prepared]
