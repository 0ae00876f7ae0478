"""Host-memory parking on a GPU (warm_pool.weights: host, ADR 0128): park frees the
device memory of the weights, promotion brings them back, the answers are the same.
Skipped without CUDA; never run on this team's machines (no GPU) so far."""

from __future__ import annotations

import os

import pytest
import torch

from sluice.config import parse_config
from tests.kit.cuda import needs_cuda
from workers.handlers import HandlerContext, make_handler

pytestmark = [needs_cuda, pytest.mark.system]
TEXTS = ["a warm pool keeps workers loaded", "promotion copies the weights back", "x"]


def test_park_frees_the_weights_and_unpark_restores_the_answers() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg = parse_config({"models": {"e": {"handler": "embedding"}}})
    h = make_handler(HandlerContext("e", cfg.model("e"), device="cuda:0"))
    h.load()
    batch = h.collate(TEXTS, [1] * len(TEXTS))
    before = h.infer(batch).cpu()
    weights = sum(p.numel() * p.element_size() for p in h.model.parameters())  # type: ignore[attr-defined]
    torch.cuda.synchronize()
    on_device = torch.cuda.memory_allocated()
    h.park()
    parked = torch.cuda.memory_allocated()
    assert on_device - parked >= 0.9 * weights
    assert all(p.device.type == "cpu" and p.is_pinned() for p in h.model.parameters())  # type: ignore[attr-defined]
    h.unpark()
    assert all(p.device.type == "cuda" for p in h.model.parameters())  # type: ignore[attr-defined]
    after = h.infer(batch).cpu()
    assert torch.allclose(before, after, atol=1e-6)
