"""Handlers that misbehave on purpose, loaded as ``tests.kit.fault_handlers:Class``."""

from __future__ import annotations

import time
import weakref
from pathlib import Path
from typing import Any

import torch

from sluice.cost import input_text
from workers.handlers.base import Collated, Shape
from workers.handlers.synthetic import SyntheticHandler
from workers.handlers.tiny import TinyHandler


class PoisonHandler(TinyHandler):
    """Any batch holding an input with the word ``poison`` raises."""

    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        if any("poison" in input_text(x) for x in inputs):
            raise ValueError("poison input")
        return super().collate(inputs, costs)


class OomHandler(TinyHandler):
    """Raises CUDA out-of-memory (on CPU too) above ``params.oom_above`` padded tokens.

    At warm-up only if ``params.oom_in_warmup``: otherwise a bucket whose single
    largest input is over the limit would (rightly) stop the worker from starting.
    """

    seen: list[int] = []  # batch sizes that ran, for assertions

    def warmup_full_batches(self) -> bool:
        return True  # it stands for a GPU: a memory limit the warm-up must find

    def warmup(self, shapes: list[Shape]) -> None:
        if self.params.get("oom_in_warmup"):
            for s in shapes:
                if s.batch * s.tokens > int(self.params.get("oom_above", 16)):
                    raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")

    def infer(self, batch: Collated) -> Any:
        if batch.padded_tokens > int(self.params.get("oom_above", 16)):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        OomHandler.seen.append(batch.size)
        return super().infer(batch)


class BrokenHandler(SyntheticHandler):
    """Every batch fails, as on a worker whose device is gone."""

    def infer(self, batch: Collated) -> Any:
        raise RuntimeError("device lost")


class NotJsonHandler(SyntheticHandler):
    """Returns a result that cannot be stored as JSON for inputs saying so."""

    def postprocess(self, output: Any, batch: Collated) -> list[Any]:
        return [{"tokens": c} if c != 3 else {"oops": object()} for c in output]


class SlowCollateHandler(SyntheticHandler):
    """Collating takes ``params.collate_ms``: with overlap the worker sits between
    batches holding a prefetched lease while the prefetch thread collates."""

    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        time.sleep(float(self.params.get("collate_ms", 0)) / 1000)
        return super().collate(inputs, costs)


class HeldTensorHandler(TinyHandler):
    """Allocates a real tensor in ``infer``, then fails any batch of more than one input
    (``params.error``: ``oom``, the default, or ``value``), at warm-up too. Records whether a failed
    attempt's tensor was still alive when memory was freed and when the next attempt ran."""

    def load(self) -> None:
        super().load()
        self.failed: list[weakref.ref[torch.Tensor]] = []
        self.alive_at_free: list[bool] = []
        self.alive_at_run: list[bool] = []

    def _alive(self) -> bool:
        return any(ref() is not None for ref in self.failed)

    def _run(self, size: int) -> None:
        self.alive_at_run.append(self._alive())
        held = torch.ones(size, 1 << 16)  # stands for the activations of a forward
        if size > 1:
            self.failed.append(weakref.ref(held))
            if self.params.get("error", "oom") == "oom":
                raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
            raise ValueError("fails as a batch")

    def warmup(self, shapes: list[Shape]) -> None:
        for s in shapes:
            self._run(s.batch)

    def infer(self, batch: Collated) -> Any:
        self._run(batch.size)
        return super().infer(batch)

    def free_memory(self) -> None:
        self.alive_at_free.append(self._alive())


class NoHalfKernelsHandler(TinyHandler):
    """A device without float16 kernels, as CPUs were in older torch: the dtype probe
    fails the way torch did then."""

    def probe_dtype(self, dtype: torch.dtype) -> None:
        if dtype == torch.float16:
            raise RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'")
        super().probe_dtype(dtype)


class ParkRecordingHandler(SyntheticHandler):
    """Counts park/unpark calls and the state each found the weights in."""

    def load(self) -> None:
        super().load()
        self.calls: list[str] = []
        self.on_device = True

    def park(self) -> None:
        assert self.on_device, "parked twice"
        self.calls.append("park")
        self.on_device = False

    def unpark(self) -> None:
        assert not self.on_device, "unparked while on the device"
        self.calls.append("unpark")
        self.on_device = True

    def infer(self, batch: Collated) -> Any:
        assert self.on_device, "a batch ran while the weights were parked"
        return super().infer(batch)


class SwitchedHandler(SyntheticHandler):
    """Switched by files, for operator-action tests: an input with ``poison`` fails
    while the file ``params.poison_flag`` exists; one with ``hold`` runs until the file
    ``params.hold_flag`` is gone (the worker stays busy, so later jobs stay queued)."""

    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        texts = [input_text(x) for x in inputs]
        if any("poison" in t for t in texts) and Path(self.params["poison_flag"]).exists():
            raise ValueError("poison input")
        while any("hold" in t for t in texts) and Path(self.params["hold_flag"]).exists():
            time.sleep(0.01)
        return super().collate(inputs, costs)
