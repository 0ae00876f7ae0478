"""A generative job's input and result, as stored in the job hash (ADR 0144).

The gateway tokenizes the prompt (it must count it to admit the job) and stores
the ids with the sampling parameters; the worker decodes them. A sampled job
without a seed gets one at submit, so a run again after a crash reproduces the
tokens already streamed and a client never sees a token twice.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

FinishReason = Literal["stop", "length", "cancelled", "error"]

MAX_STOP_SEQUENCES = 4  # OpenAI's limit


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How one sequence is decoded. temperature 0 is greedy (top_p/top_k ignored)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k cut
    seed: int | None = None  # per-job reproducible sampling
    stop: tuple[str, ...] = ()  # the output ends before the first of these

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SamplingParams:
        return cls(
            max_tokens=int(d["max_tokens"]),
            temperature=float(d.get("temperature", 1.0)),
            top_p=float(d.get("top_p", 1.0)),
            top_k=int(d.get("top_k", 0)),
            seed=None if d.get("seed") is None else int(d["seed"]),
            stop=tuple(d.get("stop") or ()),
        )


@dataclass(frozen=True, slots=True)
class GenerateInput:
    """The job hash's ``input`` of a generative job."""

    prompt_ids: tuple[int, ...]
    sampling: SamplingParams

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_ids": list(self.prompt_ids), "sampling": self.sampling.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GenerateInput:
        ids = d["prompt_ids"]
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise ValueError("prompt_ids: a list of token ids")
        return cls(prompt_ids=tuple(ids), sampling=SamplingParams.from_dict(d["sampling"]))


@dataclass(frozen=True, slots=True)
class GenerateResult:
    """The job's result (and the stream's ``end`` entry): the whole output."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    prompt_tokens: int
    attempt: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def completion_tokens(self) -> int:
        return len(self.token_ids)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "token_ids": list(self.token_ids),
            "finish_reason": self.finish_reason,
            "attempt": self.attempt,
            "usage": {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
            },
            **self.extra,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GenerateResult:
        known = {"text", "token_ids", "finish_reason", "attempt", "usage"}
        return cls(
            text=d["text"],
            token_ids=tuple(d["token_ids"]),
            finish_reason=d["finish_reason"],
            prompt_tokens=int(d["usage"]["prompt_tokens"]),
            attempt=int(d.get("attempt", 1)),
            extra={k: v for k, v in d.items() if k not in known},
        )
