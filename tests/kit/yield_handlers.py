"""Handlers that hold their first batch until a test opens a gate, loaded as
``tests.kit.yield_handlers:GateHandler`` (bulk yield tests, ADR 0155) and
``tests.kit.yield_handlers:GatedTiny`` (a torch batch stopped between its
micro-batches, ADR 0164)."""

from __future__ import annotations

import threading
from typing import Any

from workers.handlers.base import Collated
from workers.handlers.synthetic import SyntheticHandler
from workers.handlers.tiny import TinyHandler


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


class GatedTiny(TinyHandler):
    """The tiny torch model with ``params.micro_batch`` (ADR 0164): its first forward
    pass waits (up to 10 s) for ``gate`` after setting ``entered``; counts rows, and
    sets ``done`` when a batch's ``infer`` returns or raises. Class-level: reset() first."""

    entered = threading.Event()
    gate = threading.Event()
    done = threading.Event()
    rows = 0  # rows computed, over every forward pass

    @classmethod
    def reset(cls) -> None:
        cls.entered, cls.gate, cls.done, cls.rows = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
            0,
        )

    def warmup(self, shapes: list[Any]) -> None:
        return  # the gate is for the first real batch

    def infer(self, batch: Collated) -> Any:
        try:
            return super().infer(batch)
        finally:
            GatedTiny.done.set()

    def forward(self, batch: Collated) -> Any:
        GatedTiny.rows += batch.size
        if not GatedTiny.gate.is_set():
            GatedTiny.entered.set()
            GatedTiny.gate.wait(10)
        return super().forward(batch)
