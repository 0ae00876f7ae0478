"""A small deterministic torch model for fast tests: words -> 8 floats.

Weights come from a fixed seed, words map to ids by CRC32, and pooling is a
masked mean, so a text's result does not depend on what else shares its batch.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from sluice.cost import input_text
from workers.handlers.base import Collated, HandlerContext, Shape, checked_text
from workers.handlers.torch_base import TorchHandler


def word_ids(text: str, vocab: int) -> list[int]:
    """1-based ids (0 is padding); an empty text is one id so it still has a vector."""
    words = text.split() or [""]
    return [1 + zlib.crc32(w.encode()) % (vocab - 1) for w in words]


class TinyHandler(TorchHandler):
    """Params: ``dim`` (16), ``out`` (8), ``vocab`` (1000), ``seed`` (0), ``dtype``."""

    def __init__(self, ctx: HandlerContext) -> None:
        super().__init__(ctx)
        self.dim = int(self.params.get("dim", 16))
        self.out = int(self.params.get("out", 8))
        self.vocab = int(self.params.get("vocab", 1000))
        self.seed = int(self.params.get("seed", 0))

    def load(self) -> None:
        gen = torch.Generator().manual_seed(self.seed)
        embed = torch.randn(self.vocab, self.dim, generator=gen)
        embed[0] = 0.0
        proj = torch.randn(self.dim, self.out, generator=gen) / self.dim**0.5
        self.embed = embed.to(self.device, self.dtype)  # params.dtype, like a real model
        self.proj = proj.to(self.device, self.dtype)

    def warmup(self, shapes: list[Shape]) -> None:
        for s in shapes:
            ids = torch.ones(s.batch, s.tokens, dtype=torch.long)
            self.infer(Collated(ids, s.batch, s.batch * s.tokens, s.batch * s.tokens))

    def validate(self, value: Any) -> None:
        checked_text(value)

    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        rows = [word_ids(input_text(x), self.vocab) for x in inputs]
        longest = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), longest, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
        return Collated(ids, len(rows), len(rows) * longest, sum(len(r) for r in rows))

    def forward(self, batch: Collated) -> Any:
        ids = batch.data.to(self.device)
        mask = (ids > 0).unsqueeze(-1).float()
        pooled = (self.embed[ids].float() * mask).sum(1) / mask.sum(1).clamp(min=1.0)  # fp32
        return torch.tanh(pooled.to(self.proj.dtype) @ self.proj)

    def postprocess(self, output: Any, batch: Collated) -> list[Any]:
        return [{"vector": [round(v, 6) for v in row]} for row in output.float().cpu().tolist()]
