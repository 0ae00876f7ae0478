"""``params.dtype``: the weights are held in it, and a device that cannot run it is
refused at start with the setting named."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from sluice.errors import ConfigError
from tests.kit.fault_handlers import NoHalfKernelsHandler
from tests.kit.workers import MODEL, cosines, mixed_texts, worker_config
from workers.handlers import HandlerContext, make_handler
from workers.handlers.base import Handler
from workers.handlers.torch_base import TorchHandler

NO_HALF = "tests.kit.fault_handlers:NoHalfKernelsHandler"


def param_bytes(h: Handler) -> int:
    tensors = h.model.parameters() if hasattr(h, "model") else (h.embed, h.proj)  # type: ignore[attr-defined]
    return sum(t.numel() * t.element_size() for t in tensors)


def run(h: Handler, texts: list[str]) -> np.ndarray:
    batch = h.collate(texts, [1] * len(texts))
    rows = h.postprocess(h.infer(batch), batch)
    return np.array([next(iter(row.values())) for row in rows])


def loaded(handler: str, **params: object) -> Handler:
    cfg = worker_config(handler, params=dict(params))
    h = make_handler(HandlerContext(MODEL, cfg.model(MODEL), device="cpu"))
    h.load()
    return h


@pytest.mark.system
def test_bfloat16_embedding_halves_weight_memory_and_keeps_its_answers() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    full, half = loaded("embedding"), loaded("embedding", dtype="bfloat16")
    assert {p.dtype for p in half.model.parameters()} == {torch.bfloat16}  # type: ignore[attr-defined]
    assert param_bytes(half) * 2 == param_bytes(full)  # about 45 MB instead of 91 MB
    # Every length of mixed_texts(16, seed=5) once (2 to 290 words, 8 texts), padded
    # in one batch: its repeats added no length, and bfloat16 on a CPU without its
    # kernels costs ~0.7 CPU s a row padded to 290 words (12 of the test's 14 s).
    texts = list({len(t.split()): t for t in mixed_texts(16, seed=5)}.values())
    assert sorted(len(t.split()) for t in texts) == [2, 5, 12, 20, 45, 80, 150, 290]
    got, ref = run(half, texts), run(full, texts)
    assert got.dtype == np.float64 and np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert cosines(got, ref).min() >= 0.99


def test_tiny_holds_its_weights_in_the_dtype_too() -> None:
    full, half = loaded("tiny"), loaded("tiny", dtype="bf16")
    assert param_bytes(half) * 2 == param_bytes(full)
    texts = ["a b c", "queue worker", "one two three four five"]
    assert cosines(run(half, texts), run(full, texts)).min() >= 0.99


def test_a_dtype_the_device_cannot_run_is_refused_naming_the_setting() -> None:
    cfg = worker_config(NO_HALF, params={"dtype": "float16"})
    with pytest.raises(ConfigError, match=r"models\.m\.params\.dtype 'float16' on cpu: .*'Half'"):
        NoHalfKernelsHandler(HandlerContext(MODEL, cfg.model(MODEL), device="cpu"))
    ok = worker_config(NO_HALF, params={"dtype": "bfloat16"})  # what it can run is kept
    assert NoHalfKernelsHandler(HandlerContext(MODEL, ok.model(MODEL))).dtype == torch.bfloat16


def test_an_unknown_dtype_is_a_config_error() -> None:
    cfg = worker_config(params={"dtype": "float8"})
    with pytest.raises(ConfigError, match=r"models\.m\.params\.dtype 'float8': use one of"):
        make_handler(HandlerContext(MODEL, cfg.model(MODEL)))


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_float32_is_never_probed(device: str) -> None:
    cfg = worker_config(params={"dtype": "float32"})
    h = TorchHandler(HandlerContext(MODEL, cfg.model(MODEL), device=device))
    assert h.dtype == torch.float32 and h.dtype_problem(torch.float32) is None
