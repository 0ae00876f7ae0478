"""Handlers for the GPU tier, loaded as ``tests.kit.gpu_handlers:Class``."""

from __future__ import annotations

import os
from typing import Any

import torch

from sluice.cost import input_text
from workers.handlers.base import Collated, Shape
from workers.handlers.torch_base import TorchHandler


class CudaHogHandler(TorchHandler):
    """Each input of a batch allocates ``params.chunk_bytes`` on the device, one after
    another, like the activations of a forward: a batch too big for the device fails
    with a real CUDA out-of-memory after filling most of it. Warm-up allocates
    ``params.warmup_bytes_per_token`` per token of the shape at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ran: list[int] = []  # batch sizes that fitted

    def warmup(self, shapes: list[Shape]) -> None:
        per_token = int(self.params.get("warmup_bytes_per_token", 0))
        for s in shapes:
            block = torch.empty(
                s.batch * s.tokens * per_token, dtype=torch.uint8, device=self.device
            )
            block.fill_(1)
            self.ran.append(s.batch)

    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        return Collated(list(inputs), len(inputs), sum(costs), sum(costs))

    def forward(self, batch: Collated) -> Any:
        chunk = int(self.params["chunk_bytes"])
        held = [torch.ones(chunk, dtype=torch.uint8, device=self.device) for _ in range(batch.size)]
        self.ran.append(batch.size)
        return [int(h[:16].sum().item()) for h in held]

    def postprocess(self, output: Any, batch: Collated) -> list[Any]:
        return [{"ones": n} for n in output]


class WhereAmIHandler(TorchHandler):
    """Answers each input with the device this worker process sees."""

    def load(self) -> None:
        self.marker = torch.ones(1, device=self.device)  # the CUDA context, on its device

    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        return Collated([input_text(x) for x in inputs], len(inputs), sum(costs), sum(costs))

    def forward(self, batch: Collated) -> Any:
        props = torch.cuda.get_device_properties(self.device)
        return {
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "device_count": torch.cuda.device_count(),
            "device": str(self.marker.device),
            "uuid": str(props.uuid),
        }

    def postprocess(self, output: Any, batch: Collated) -> list[Any]:
        return [dict(output) for _ in batch.data]
