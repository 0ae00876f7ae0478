"""A handler that models GPU time by sleeping, so dozens of workers fit on one box.

It imports no torch: a synthetic worker starts in well under a second and uses
little memory, which is what scaling tests need.
"""

from __future__ import annotations

import math
import time
import zlib
from typing import Any

from workers.handlers.base import Collated, Handler, Shape, Stopped

STOP_CHECK_S = 0.02  # the sleep's slices: a stopped batch ends within one of them


class SyntheticHandler(Handler):
    """Sleeps ``base_ms + per_token_ms x padded tokens`` per batch.

    Params: ``base_ms`` (5), ``per_token_ms`` (0.05), ``load_ms`` (0; sleeps in
    ``load`` to model a cold start), ``embedding_dim`` (0; above 0 each result is
    ``{"embedding": [...]}`` of that many floats, a unit vector derived from the
    input, so load tests carry a real embedding's size and ``/v1/embeddings`` works).
    """

    def load(self) -> None:
        self.base_ms = float(self.params.get("base_ms", 5.0))
        self.per_token_ms = float(self.params.get("per_token_ms", 0.05))
        self.dim = int(self.params.get("embedding_dim", 0))
        load_ms = float(self.params.get("load_ms", 0.0))
        if load_ms > 0:
            time.sleep(load_ms / 1000)

    def warmup(self, shapes: list[Shape]) -> None:
        # Nothing to compile or allocate; sleeping here would only slow scaling tests.
        return

    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        longest = max(costs, default=0)
        # With embeddings the inputs ride along (each vector derives from its input).
        data = list(inputs) if self.dim > 0 else list(costs)
        return Collated(data, len(costs), longest * len(costs), sum(costs))

    def batch_ms(self, padded_tokens: int) -> float:
        return self.base_ms + self.per_token_ms * padded_tokens

    def infer(self, batch: Collated) -> Any:
        # In slices, like micro-batches: between two, a batch whose jobs all ended
        # elsewhere stops (ADR 0154).
        end = time.monotonic() + self.batch_ms(batch.padded_tokens) / 1000
        while (left := end - time.monotonic()) > 0:
            if self.should_stop():
                raise Stopped
            time.sleep(min(left, STOP_CHECK_S))
        return batch.data

    def postprocess(self, output: Any, batch: Collated) -> list[Any]:
        if self.dim > 0:
            return [{"embedding": unit_vector(value, self.dim)} for value in output]
        return [{"tokens": cost} for cost in output]


def unit_vector(value: Any, dim: int) -> list[float]:
    """A deterministic unit vector of ``dim`` floats for ``value`` (the same input
    gives the same vector on every worker and run)."""
    seed = zlib.crc32(repr(value).encode())
    raw = [math.sin(seed + 1.618 * i) for i in range(dim)]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    return [v / norm for v in raw]
