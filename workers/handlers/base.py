"""The handler protocol: what a model must provide to be served by a worker.

A worker calls, in order: ``load()`` once, ``warmup(shapes)`` once, then per batch
``collate(inputs, costs)`` -> ``infer(collated)`` -> ``postprocess(output, collated)``.
Nothing here imports torch; torch handlers subclass
:class:`workers.handlers.torch_base.TorchHandler`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluice.config import ModelConfig
from sluice.cost import CostEstimator, input_text
from sluice.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class Shape:
    """A batch shape: ``batch`` inputs of ``tokens`` cost units each."""

    batch: int
    tokens: int


@dataclass
class HandlerContext:
    """What a handler is built with."""

    model: str
    config: ModelConfig
    device: str = "cpu"
    params: dict[str, Any] = field(default_factory=dict)
    estimator: CostEstimator | None = None

    def __post_init__(self) -> None:
        if not self.params:
            self.params = dict(self.config.params)
        if self.estimator is None:
            self.estimator = CostEstimator(self.config)


@dataclass
class Collated:
    """A batch ready for ``infer``: the handler's data plus padding accounting."""

    data: Any
    size: int
    padded_tokens: int  # what the device computes on: size x the longest input
    real_tokens: int  # the sum of the inputs' own lengths


class Stopped(Exception):  # noqa: N818 - a signal, not an error: the jobs ended elsewhere
    """Raised by a handler when :meth:`Handler.should_stop` says so: every job of the
    batch ended while it ran (cancelled, past its deadline or limits.max_run_ms). The
    worker sends nothing for them and does not count the batch as failed."""


def _never() -> bool:
    return False


class Handler:
    """Base class of every handler. Override ``collate``, ``infer`` and ``postprocess``."""

    uses_torch = False  # True makes ``--device auto`` look for CUDA (imports torch)

    def __init__(self, ctx: HandlerContext) -> None:
        self.ctx = ctx
        self.params = ctx.params
        # What ``load`` spent per start stage (workers/startpath.py): imports,
        # weights_read, to_device. Whatever it leaves out counts as weights_read.
        self.load_stages: dict[str, float] = {}
        self._stop_check: Callable[[], bool] = _never

    def should_stop(self) -> bool:
        """Whether the running batch's jobs have all ended elsewhere (ADR 0154): a
        handler that computes in steps (micro-batches, sleeps) checks it between
        them and raises :class:`Stopped`. Cheap: a set lookup, no round trip (the
        worker's lease renewals bring the news)."""
        return self._stop_check()

    def bind_stop(self, check: Callable[[], bool] | None) -> None:
        """The worker sets the running batch's check (None: never stop)."""
        self._stop_check = check or _never

    def cpu_threads(self) -> int | None:
        """The CPU threads this handler computes with (None: it computes on no CPU
        threads of its own, e.g. it sleeps or runs on a GPU)."""
        return None

    def load(self) -> None:
        """Load weights onto ``ctx.device``; a worker is ``starting`` until this returns."""

    def warmup(self, shapes: list[Shape]) -> None:
        """Run once on each shape so the first real batch pays no compile/allocation cost."""

    def park(self) -> None:
        """A warm-pool worker parks with ``warm_pool.weights: host``: move the weights
        off the device (they come back in ``unpark``, on promotion)."""

    def unpark(self) -> None:
        """Promoted: put back on the device what ``park`` moved off it."""

    def warmup_full_batches(self) -> bool:
        """Whether warm-up must run each bucket's largest batch (to find the device's
        memory limit before a real batch does), or one input per bucket will do."""
        return True

    def validate(self, value: Any) -> None:
        """Raise ``InvalidInput`` if this handler cannot use ``value``. Called per job
        before its batch is collated: a bad input fails alone, the batch stays whole."""

    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        raise NotImplementedError

    def infer(self, batch: Collated) -> Any:
        raise NotImplementedError

    def postprocess(self, output: Any, batch: Collated) -> list[Any]:
        """One JSON-serialisable result per input, in order."""
        raise NotImplementedError

    def is_oom(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the device ran out of memory (split the batch and retry)."""
        return is_oom_error(exc)

    def free_memory(self) -> None:
        """Called after an out-of-memory error, before the halves are retried."""

    def close(self) -> None:
        """Release the model (called once when the worker exits)."""


# Out-of-memory errors torch raises as a plain RuntimeError, by what their message says.
OOM_MESSAGES = (
    "CUDA out of memory",  # the caching allocator, before torch had its own exception type
    "CUDA error: out of memory",  # the CUDA runtime itself (cudaErrorMemoryAllocation)
    "CUBLAS_STATUS_ALLOC_FAILED",  # cuBLAS could not allocate its handle or workspace
    "CUDNN_STATUS_ALLOC_FAILED",  # cuDNN likewise
    "MPS backend out of memory",  # Apple GPUs
)


def is_oom_error(exc: BaseException) -> bool:
    """``torch.OutOfMemoryError`` (alias ``torch.cuda.OutOfMemoryError``), or a
    ``RuntimeError`` whose message is one of ``OOM_MESSAGES``. Never imports torch."""
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(
        getattr(torch, "cuda", None), "OutOfMemoryError", None
    )
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in OOM_MESSAGES)


def warmup_shapes(config: ModelConfig, buckets: list[str], full: bool = True) -> list[Shape]:
    """The largest shape each served bucket can produce under the batching limits.

    A claim fills ``max_batch`` jobs or ``max_batch_tokens`` cost, whichever comes
    first, so the largest batch of a bucket is ``min(max_batch, budget // bound)``
    inputs of ``bound`` tokens (at least one). Not ``full``: one input of ``bound``
    tokens per bucket (a CPU has no device memory limit to find, and its first
    large batch is no slower after a small warm-up: docs/benchmarks/autoscaler.md).
    """
    b = config.batching
    shapes = []
    for name in buckets:
        bound = int(name)
        batch = max(1, min(b.max_batch, b.max_batch_tokens // bound)) if full else 1
        shapes.append(Shape(batch, bound))
    return shapes


def checked_text(value: Any) -> str:
    """A text model's input as text a tokenizer can encode (``InvalidInput`` if not).

    A lone surrogate is valid JSON but not valid UTF-8: tokenizers fail on it with
    a TypeError that looks like a fault of the worker, not of the input.
    """
    text = input_text(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        where = f"a lone surrogate at {e.start}"
        raise InvalidInput(f"input text is not valid Unicode ({where})") from e
    return text
