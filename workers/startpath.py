"""A worker's start path, stage by stage: where a cold start's seconds go.

Stages, in order: ``process`` (the process's creation to the worker command's
entry: the interpreter and the CLI's imports), ``imports`` (the handler's modules:
torch, a model library), ``weights_read`` (the weights from disk into memory),
``to_device`` (onto the GPU, or cast on the CPU), ``warmup`` (one batch per shape)
and ``first_claim`` (ready to the first claim's reply). A handler that does not
split its ``load`` has it all counted as ``weights_read``.

The worker logs them once ready, exports them as ``sluice_worker_start_seconds``
and puts them in its heartbeat (``extra.start_path``), where the autoscaler's
observation and ``sluice status`` read them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

STAGES = ("process", "imports", "weights_read", "to_device", "warmup", "first_claim")


def process_age_s() -> float:
    """Seconds since this process was created (its start, as the kernel saw it)."""
    import psutil

    return max(0.0, time.time() - psutil.Process().create_time())


@dataclass
class StartPath:
    stages: dict[str, float] = field(default_factory=dict)

    def add(self, stage: str, seconds: float) -> None:
        if stage not in STAGES:
            raise ValueError(f"unknown start stage {stage!r}; use {list(STAGES)}")
        self.stages[stage] = round(self.stages.get(stage, 0.0) + max(0.0, seconds), 4)

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(stage, time.perf_counter() - t0)

    @property
    def total_s(self) -> float:
        return sum(self.stages.values())

    def summary(self) -> str:
        done = [s for s in STAGES if s in self.stages]
        parts = [f"{s.replace('_', ' ')} {self.stages[s]:.2f} s" for s in done]
        return ", ".join(parts) + f" (total {self.total_s:.2f} s)"

    def as_dict(self) -> dict[str, float]:
        return {s: self.stages[s] for s in STAGES if s in self.stages}
