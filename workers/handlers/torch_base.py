"""Shared base of torch handlers: device, inference mode, autocast, OOM cleanup."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from workers.handlers.base import Collated, Handler, HandlerContext

DTYPES = {"float16": torch.float16, "fp16": torch.float16, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16}  # fmt: skip


class TorchHandler(Handler):
    """Runs ``forward`` under ``torch.inference_mode()``, autocast on CUDA if asked.

    Params: ``dtype`` (``float16`` / ``bfloat16``: autocast on CUDA; ignored on
    CPU), ``num_threads`` (torch intra-op threads on CPU; default torch's own).
    """

    uses_torch = True

    def __init__(self, ctx: HandlerContext) -> None:
        super().__init__(ctx)
        self.device = torch.device(ctx.device)
        threads = int(self.params.get("num_threads", 0) or 0)
        if threads > 0 and self.device.type == "cpu":
            torch.set_num_threads(threads)
        dtype = self.params.get("dtype")
        if dtype is not None and dtype not in DTYPES:
            raise ValueError(f"params.dtype {dtype!r}: use one of {sorted(DTYPES)}")
        self.autocast_dtype = DTYPES.get(dtype) if dtype else None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.autocast_dtype is not None and self.device.type == "cuda":
            return torch.autocast("cuda", dtype=self.autocast_dtype)
        return contextlib.nullcontext()

    def infer(self, batch: Collated) -> Any:
        with torch.inference_mode(), self.autocast():
            return self.forward(batch)

    def forward(self, batch: Collated) -> Any:
        raise NotImplementedError

    def free_memory(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
