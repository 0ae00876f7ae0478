"""Shared base of torch handlers: device, weight dtype, inference mode, OOM cleanup."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch

from sluice.cores import THREADS_ENV
from sluice.errors import ConfigError
from workers.handlers.base import Collated, Handler, HandlerContext
from workers.handlers.micro import run_sliced

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


class TorchHandler(Handler):
    """Runs ``forward`` under ``torch.inference_mode()``, with weights in ``self.dtype``.

    Params: ``dtype`` (``float32``, the default, ``float16`` or ``bfloat16``: the
    handler holds its weights in it, so a half type halves weight memory; on CUDA
    the forward also runs under autocast to it), ``num_threads`` (torch intra-op
    threads on CPU; default: the cores the local backend gave this worker in
    ``SLUICE_NUM_THREADS``, else torch's own), ``micro_batch`` (rows per forward
    pass; between two passes a batch whose jobs all ended stops: ADR 0164). A
    dtype the device cannot run is refused here, at start, with a ``ConfigError``
    naming the setting.
    """

    uses_torch = True

    def __init__(self, ctx: HandlerContext) -> None:
        super().__init__(ctx)
        self.device = torch.device(ctx.device)
        # params.num_threads, else the cores the local backend gave this worker
        # (sluice/cores.py), else torch's own default.
        threads = int(self.params.get("num_threads", 0) or os.environ.get(THREADS_ENV) or 0)
        if threads > 0 and self.device.type == "cpu":
            torch.set_num_threads(threads)
        self.dtype = self._checked_dtype(self.params.get("dtype"))
        self.micro_batch = int(self.params.get("micro_batch") or 0)
        if self.micro_batch < 0:
            raise ConfigError(f"models.{ctx.model}.params.micro_batch: a positive row count")

    def cpu_threads(self) -> int | None:
        return torch.get_num_threads() if self.device.type == "cpu" else None

    def modules(self) -> list[torch.nn.Module]:
        """The modules ``park`` moves (a handler keeping plain tensors overrides the pair)."""
        model = getattr(self, "model", None)
        return [model] if isinstance(model, torch.nn.Module) else []

    def park(self) -> None:
        """On a GPU: the weights to pinned host memory (a fast copy back), the cache freed."""
        if self.device.type != "cuda":
            return
        for module in self.modules():
            module.to("cpu")
            for t in [*module.parameters(), *module.buffers()]:
                t.data = t.data.pin_memory()
        torch.cuda.empty_cache()

    def unpark(self) -> None:
        if self.device.type != "cuda":
            return
        for module in self.modules():
            module.to(self.device, non_blocking=True)
        torch.cuda.synchronize(self.device)

    def warmup_full_batches(self) -> bool:
        # Only a GPU has a memory limit the largest batches must be tried against.
        return self.device.type != "cpu"

    def _checked_dtype(self, name: Any) -> torch.dtype:
        setting = f"models.{self.ctx.model}.params.dtype"
        if name is None:
            return torch.float32
        if name not in DTYPES:
            raise ConfigError(f"{setting} {name!r}: use one of {', '.join(DTYPES)}")
        dtype = DTYPES[name]
        problem = self.dtype_problem(dtype)
        if problem is not None:
            raise ConfigError(f"{setting} {name!r} on {self.device}: {problem}; use float32")
        return dtype

    def dtype_problem(self, dtype: torch.dtype) -> str | None:
        """Why this handler's device cannot run ``dtype`` (None if it can).

        Cheap: on CUDA, bfloat16 needs compute capability 8.0 or newer (older GPUs
        only emulate it, slowly); everywhere, a few ops of a transformer layer run
        once on a tiny tensor, which fails fast where a kernel is missing (float16
        on CPU in older torch: "not implemented for 'Half'").
        """
        if dtype == torch.float32:
            return None
        if self.device.type == "cuda" and dtype == torch.bfloat16 and not _native_bf16(self.device):
            name = torch.cuda.get_device_name(self.device)
            return f"{name} has no native bfloat16 (needs compute capability 8.0+)"
        try:
            self.probe_dtype(dtype)
        except RuntimeError as e:
            return f"the device cannot run it ({str(e).splitlines()[0][:200]})"
        return None

    def probe_dtype(self, dtype: torch.dtype) -> None:
        """Run, once and tiny, the ops a transformer layer needs in ``dtype``."""
        x = torch.ones(2, 8, device=self.device, dtype=dtype)
        y = torch.nn.functional.linear(x, torch.ones(8, 8, device=self.device, dtype=dtype))
        y = torch.nn.functional.layer_norm(y, (8,))
        torch.nn.functional.gelu(torch.softmax(y, dim=-1))

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.dtype != torch.float32 and self.device.type == "cuda":
            return torch.autocast("cuda", dtype=self.dtype)
        return contextlib.nullcontext()

    def infer(self, batch: Collated) -> Any:
        # params.micro_batch: forward passes of that many rows, should_stop() between
        # them (workers/handlers/micro.py); unset, one pass.
        with torch.inference_mode(), self.autocast():
            return run_sliced(batch, self.micro_batch, self.forward, self.should_stop, torch.cat)

    def forward(self, batch: Collated) -> Any:
        raise NotImplementedError

    def free_memory(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def _native_bf16(device: torch.device) -> bool:
    # What torch.cuda.is_bf16_supported(including_emulation=False) checks (torch 2.4+),
    # without the emulation fallback older torch reports as support.
    return bool(torch.version.hip) or torch.cuda.get_device_capability(device) >= (8, 0)
