"""The generative gateway tests' model config and fake prompt codec
(tests/pure/generate): models ``m`` and ``g`` (generative, ``MAX_SEQ`` tokens),
and a codec of one token per character, so no tokenizer is loaded."""

from __future__ import annotations

from typing import Any

from sluice.config import ModelConfig, SluiceConfig
from tests.factories import sluice_config

MAX_SEQ = 64


class CharCodec:
    """One token per character (its code point); chat joins ``role: content`` lines."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def chat(self, messages: list[dict[str, Any]]) -> list[int]:
        lines = []
        for m in messages:
            if not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise ValueError("each message needs a string role and content")
            lines.append(f"{m['role']}: {m['content']}")
        return self.encode("\n".join(lines) + "\nassistant: ")

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)


def generative_config(auth: dict[str, Any] | None = None, **gateway: Any) -> SluiceConfig:
    """Models ``m`` and ``g`` (generative); ``auth``: the config's auth section."""
    sections: dict[str, Any] = {"auth": auth} if auth else {}
    cfg = sluice_config(
        {"autoscaling": {"min_replicas": 0}},
        gateway={"predict_timeout_s": 20, **gateway},
        **sections,
    )
    g = ModelConfig.model_validate(
        {
            "handler": "causal-lm",
            "params": {"model": "tiny:2x64"},
            "buckets": [16, 32, 64],
            "cost": {"method": "chars"},
            "autoscaling": {"min_replicas": 0, "max_replicas": 1},
            "generate": {"max_seq_tokens": MAX_SEQ, "default_max_tokens": 16},
        }
    )
    return cfg.model_copy(update={"models": {**cfg.models, "g": g}})
