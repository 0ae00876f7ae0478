"""A synthetic handler that fails on inputs starting with POISON, quoting the input
in its error: if anything logged handler errors, the input would reach the logs."""

from __future__ import annotations

from typing import Any

from workers.handlers.base import Collated
from workers.handlers.synthetic import SyntheticHandler


class PoisonHandler(SyntheticHandler):
    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        for value in inputs:
            if isinstance(value, str) and value.startswith("POISON"):
                raise ValueError(f"cannot handle input {value!r}")
        return super().collate(inputs, costs)
