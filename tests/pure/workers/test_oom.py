"""Out of memory: what counts as one, and a split that runs only once the failed
attempt's memory can be freed (the PyTorch FAQ's "my out of memory exception
handler can't allocate memory")."""

from __future__ import annotations

import pytest
import torch

from sluice.jobs import ClaimedJob
from tests.kit.fault_handlers import HeldTensorHandler
from tests.kit.workers import MODEL, worker_config
from workers.budget import TokenBudget
from workers.execute import BatchRunner, warm_up
from workers.handlers.base import HandlerContext, Shape, is_oom_error


def jobs(n: int) -> list[ClaimedJob]:
    return [ClaimedJob(f"m.{i}", f"text {i}", 2, 1, 0) for i in range(n)]


def held_tensor_handler(error: str) -> HeldTensorHandler:
    cfg = worker_config(params={"error": error})
    h = HeldTensorHandler(HandlerContext(MODEL, cfg.model(MODEL)))
    h.load()
    return h


def test_an_oom_split_runs_the_halves_after_the_failed_attempt_is_freed() -> None:
    h = held_tensor_handler("oom")
    res = BatchRunner(h).run(jobs(4))
    assert [o.kind for o in res.outcomes] == ["ok"] * 4
    assert res.oom_splits == 3  # 4 -> 2 + 2 -> 1 + 1 + 1 + 1
    assert len(h.failed) == 3
    assert h.alive_at_free == [False] * 3  # empty_cache() could free them
    assert h.alive_at_run == [False] * 7  # 1 whole, 2 halves, 4 singles


def test_item_by_item_retries_run_after_the_failed_batch_is_freed() -> None:
    h = held_tensor_handler("value")
    res = BatchRunner(h).run(jobs(3))
    assert [o.kind for o in res.outcomes] == ["ok"] * 3
    assert len(h.failed) == 1
    assert h.alive_at_run == [False] * 4  # the batch, then each item alone


def test_warm_up_halves_after_the_failed_shape_is_freed() -> None:
    h = held_tensor_handler("oom")
    budget = TokenBudget(4096)
    warm_up(h, [Shape(4, 32)], budget)
    assert budget.ceiling == 32  # 4 x 32 -> 2 x 32 -> 1 x 32
    assert len(h.failed) == 2
    assert h.alive_at_free == [False] * 2
    assert h.alive_at_run == [False] * 3


@pytest.mark.parametrize(
    ("exc", "oom"),
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
        (torch.cuda.OutOfMemoryError("CUDA out of memory."), True),  # the same class
        (RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; ...)"), True),
        (RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be ..."), True),
        (
            RuntimeError(
                "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
            ),
            True,
        ),
        (RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"), True),
        (RuntimeError("MPS backend out of memory (MPS allocated: 17.00 GB, ...)"), True),
        (RuntimeError("CUDA error: device-side assert triggered"), False),
        (RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"), False),
        (RuntimeError("expected scalar type Float but found Half"), False),
        (ValueError("CUDA out of memory"), False),  # not an error torch raises
        (MemoryError(), False),  # host memory: splitting the batch is no cure
    ],
)
def test_what_counts_as_out_of_memory(exc: BaseException, oom: bool) -> None:
    assert is_oom_error(exc) is oom
    assert held_tensor_handler("oom").is_oom(exc) is oom
