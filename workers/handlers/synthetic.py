"""A handler that models GPU time by sleeping, so dozens of workers fit on one box.

It imports no torch: a synthetic worker starts in well under a second and uses
little memory, which is what scaling tests need.
"""

from __future__ import annotations

import time
from typing import Any

from workers.handlers.base import Collated, Handler, Shape


class SyntheticHandler(Handler):
    """Sleeps ``base_ms + per_token_ms x padded tokens`` per batch.

    Params: ``base_ms`` (5), ``per_token_ms`` (0.05), ``load_ms`` (0; sleeps in
    ``load`` to model a cold start).
    """

    def load(self) -> None:
        self.base_ms = float(self.params.get("base_ms", 5.0))
        self.per_token_ms = float(self.params.get("per_token_ms", 0.05))
        load_ms = float(self.params.get("load_ms", 0.0))
        if load_ms > 0:
            time.sleep(load_ms / 1000)

    def warmup(self, shapes: list[Shape]) -> None:
        # Nothing to compile or allocate; sleeping here would only slow scaling tests.
        return

    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        longest = max(costs, default=0)
        return Collated(list(costs), len(costs), longest * len(costs), sum(costs))

    def batch_ms(self, padded_tokens: int) -> float:
        return self.base_ms + self.per_token_ms * padded_tokens

    def infer(self, batch: Collated) -> Any:
        time.sleep(self.batch_ms(batch.padded_tokens) / 1000)
        return batch.data

    def postprocess(self, output: Any, batch: Collated) -> list[Any]:
        return [{"tokens": cost} for cost in output]
