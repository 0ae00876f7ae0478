"""Generative submits (ADR 0144, 0148): a request's prompt and sampling, tokenized,
admitted (``sluice.generate.admission``: PromptTooLong is a 422, OpenAI's
``context_length_exceeded``) and turned into the job's ``GenerateInput``.

``gateway.service.submit`` calls :func:`prepare` for a model with a ``generate:``
section instead of its cost estimator, so priorities, deadlines, API keys,
idempotency, webhooks and the queue limits (429) apply to generative jobs
unchanged. The prompt codec (tokenizer and chat template, no torch) loads once
per model per gateway process, at its start, in a thread: a model whose codec
does not load makes /readyz not ready and its submits 503, never 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sluice.config import ModelConfig
from sluice.cost import Estimate
from sluice.errors import InvalidInput, ModelUnavailable
from sluice.generate.admission import expected_output, new_job
from sluice.generate.params import MAX_STOP_SEQUENCES, GenerateInput

log = logging.getLogger("sluice.gateway")
OFFLOAD_TEXT_CHARS = 16_384  # longer prompts are tokenized in a worker thread
LOAD_RETRY_S = 30.0  # a codec that failed to load is tried again after this


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
    """One codec per generative model of this process, loaded at start
    (:meth:`load_all`). A model whose codec fails to load is recorded in
    ``failed`` (``/readyz`` reports it) and its submits are refused with
    ModelUnavailable (503), the load tried again at most every ``retry_s``."""

    def __init__(
        self, loader: Callable[[ModelConfig], Codec] = load_codec, retry_s: float = LOAD_RETRY_S
    ) -> None:
        self.loader = loader
        self.retry_s = retry_s
        self.failed: dict[str, str] = {}  # model -> why its codec did not load
        self._failed_at: dict[str, float] = {}
        self._codecs: dict[str, Codec] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def load_all(self, models: Mapping[str, ModelConfig]) -> None:
        """Load every generative model's codec now, each in a thread; a failure is
        recorded, never raised."""
        for name, cfg in models.items():
            if cfg.generative:
                with contextlib.suppress(ModelUnavailable):
                    await self.get(name, cfg)

    async def get(self, model: str, cfg: ModelConfig) -> Codec:
        codec = self._codecs.get(model)
        if codec is not None:
            return codec
        async with self._locks.setdefault(model, asyncio.Lock()):
            codec = self._codecs.get(model)
            if codec is None:
                codec = self._codecs[model] = await self._load(model, cfg)
        return codec

    async def _load(self, model: str, cfg: ModelConfig) -> Codec:
        now = asyncio.get_running_loop().time()
        if model in self.failed and now - self._failed_at[model] < self.retry_s:
            raise self._unavailable(model)
        try:
            codec = await asyncio.to_thread(self.loader, cfg)
        except Exception as e:  # missing files, a bad template: the server's fault
            self.failed[model] = f"{type(e).__name__}: {e}"[:500]
            self._failed_at[model] = now
            log.error("model %s: its prompt codec did not load: %s", model, self.failed[model])
            raise self._unavailable(model) from e
        self.failed.pop(model, None)
        return codec

    def _unavailable(self, model: str) -> ModelUnavailable:
        return ModelUnavailable(
            f"model {model!r} cannot take jobs on this gateway: its tokenizer / chat "
            f"template did not load ({self.failed[model]}); see /readyz"
        )


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
    except (ValueError, TypeError) as e:  # TypeError: what the tokenizer refuses
        msg = str(e)
        if req.messages is not None and not msg.startswith("messages"):
            msg = f"messages: {msg}"
        raise InvalidInput(msg) from e


def _admit(
    cfg: ModelConfig, prompt_ids: list[int], req: GenerateRequest, expected: float | None
) -> Prepared:
    """Admitted (PromptTooLong when it can never fit), with a seed when sampled."""
    job = new_job(
        cfg,
        prompt_ids,
        max_tokens=req.max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        seed=req.seed,
        stop=stop_sequences(req.stop),
        expected=expected,
    )
    return Prepared(GenerateInput.from_dict(job.input), Estimate(job.cost, job.bucket))


def _prepare_each(
    codec: Codec, cfg: ModelConfig, reqs: list[GenerateRequest], expected: float | None
) -> list[Prepared]:
    out = []
    for i, req in enumerate(reqs):
        where = f"inputs[{i}]: " if len(reqs) > 1 else "input: "
        try:
            out.append(_admit(cfg, _tokenize(codec, req), req, expected))
        except InvalidInput as e:
            raise type(e)(where + str(e)) from e
    return out


async def prepare_requests(
    codecs: Codecs,
    model: str,
    cfg: ModelConfig,
    reqs: list[GenerateRequest],
    expected: float | None = None,
) -> list[Prepared]:
    """Tokenize and admit validated requests (long prompts off the event loop).
    ``expected``: the model's learned mean output length (None: the config's prior)."""
    codec = await codecs.get(model, cfg)
    chars = sum(len(r.prompt or "") + len(str(r.messages or "")) for r in reqs)
    if chars > OFFLOAD_TEXT_CHARS:
        return await asyncio.to_thread(_prepare_each, codec, cfg, reqs, expected)
    return _prepare_each(codec, cfg, reqs, expected)


async def prepare(
    codecs: Codecs,
    model: str,
    cfg: ModelConfig,
    inputs: list[Any],
    stats: Mapping[str, Any] | None = None,
) -> tuple[list[Any], list[Estimate]]:
    """The jobs API's inputs of a generative model as the jobs' stored inputs
    (``GenerateInput.to_dict()``) and their estimates, in order. ``stats``: the
    model's stats counters as last read (the learned output length)."""
    many = len(inputs) > 1
    reqs = [parse_input(v, f"inputs[{i}]" if many else "input") for i, v in enumerate(inputs)]
    expected = expected_output(stats) if stats else None
    prepared = await prepare_requests(codecs, model, cfg, reqs, expected)
    return [p.input.to_dict() for p in prepared], [p.estimate for p in prepared]
