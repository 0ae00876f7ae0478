"""A real CUDA out-of-memory: the batch splits and recovers, and the memory of the
failed attempt is freed (the retry runs outside the ``except``, see workers/execute.py)."""

from __future__ import annotations

import torch

from sluice.jobs import ClaimedJob
from tests.kit.cuda import needs_cuda
from tests.kit.workers import MODEL, worker_config
from workers.budget import TokenBudget
from workers.execute import BatchRunner, warm_up
from workers.handlers import HandlerContext, Shape, make_handler
from workers.handlers.base import Handler

pytestmark = needs_cuda
MB2 = 2 << 20  # the caching allocator rounds large blocks to 2 MiB


def free_bytes() -> int:
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info(0)[0]


def hog(**params: object) -> Handler:
    cfg = worker_config("tests.kit.gpu_handlers:CudaHogHandler", params=dict(params))
    h = make_handler(HandlerContext(MODEL, cfg.model(MODEL), device="cuda:0"))
    h.load()
    return h


def test_a_real_oom_splits_the_batch_and_every_input_succeeds() -> None:
    # Each input takes 30% of what is free: 3 fit, the 4th fails with a real OOM
    # while the first 3 are held by the failed forward. The halves (2 x 30%) fit
    # only once that attempt's memory is released; before, they failed too and
    # every input went back to the queue.
    chunk = free_bytes() * 3 // 10 // MB2 * MB2
    h = hog(chunk_bytes=chunk)
    before = torch.cuda.memory_allocated(0)
    jobs = [ClaimedJob(f"m.{i}", f"text {i}", 1, 1, 0) for i in range(4)]
    res = BatchRunner(h).run(jobs)
    assert [o.kind for o in res.outcomes] == ["ok"] * 4
    assert res.oom_splits == 1
    assert h.ran == [2, 2]  # type: ignore[attr-defined]
    assert torch.cuda.memory_allocated(0) == before  # nothing of any attempt is left
    assert torch.cuda.memory_reserved(0) < 2 * chunk + 64 * MB2  # empty_cache ran after the OOM


def test_warm_up_on_the_device_halves_until_it_fits_and_caps_the_budget() -> None:
    # The largest shape (8 x 32 tokens) needs 150% of what is free, 4 x 32 needs 75%.
    per_token = free_bytes() * 3 // 2 // (8 * 32)
    h = hog(chunk_bytes=MB2, warmup_bytes_per_token=per_token)
    before = torch.cuda.memory_allocated(0)
    budget = TokenBudget(4096)
    warm_up(h, [Shape(8, 32)], budget)
    assert h.ran == [4]  # type: ignore[attr-defined]
    assert budget.ceiling == budget.current == 4 * 32  # padded tokens of the shape that fit
    assert torch.cuda.memory_allocated(0) == before
