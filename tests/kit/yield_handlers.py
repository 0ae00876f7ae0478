"""A handler that holds its first batch until a test opens a gate, loaded as
``tests.kit.yield_handlers:GateHandler`` (bulk yield tests, ADR 0155)."""

from __future__ import annotations

import threading
from typing import Any

from workers.handlers.base import Collated
from workers.handlers.synthetic import SyntheticHandler


class GateHandler(SyntheticHandler):
    """Records every input it runs, in order; its first call waits (up to 10 s)
    for ``gate``, after setting ``entered``. Class-level: reset() before a test."""

    entered = threading.Event()
    gate = threading.Event()
    ran: list[Any] = []

    @classmethod
    def reset(cls) -> None:
        cls.entered, cls.gate, cls.ran = threading.Event(), threading.Event(), []

    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        c = super().collate(inputs, costs)
        return Collated(list(inputs), c.size, c.padded_tokens, c.real_tokens)

    def infer(self, batch: Collated) -> Any:
        GateHandler.ran.extend(batch.data)
        if not GateHandler.gate.is_set():
            GateHandler.entered.set()
            GateHandler.gate.wait(10)
        super().infer(batch)
        return [{"echo": x} for x in batch.data]

    def postprocess(self, output: Any, batch: Collated) -> list[Any]:
        return list(output)
