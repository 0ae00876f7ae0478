"""HFEngine's decode step time on tiny:4x256, one CPU thread, at batch 1 and 32,
beside the bare model forward on a DynamicCache of the same batch (what the
engine adds: packing, masks, sampling, detokenizing). Prints the figures; the
only bound is that every step ran."""

from __future__ import annotations

import statistics
import time

import pytest

from sluice.generate.params import SamplingParams
from sluice.generate.tiny import ensure_tiny

torch = pytest.importorskip("torch")

from workers.generate.hf_engine import HFEngine  # noqa: E402

pytestmark = pytest.mark.system
STEPS = 40


def _median_ms(fn: object) -> float:
    times = []
    for _ in range(STEPS):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


@pytest.mark.parametrize("batch", [1, 32])
def test_decode_step_time(batch: int) -> None:
    torch.set_num_threads(1)
    eng = HFEngine(ensure_tiny("tiny:4x256"), batch, 512, 4096, threads=1)
    for i in range(batch):
        prompt = tuple(range(100 + i, 130 + i + i % 7))
        eng.add(f"s{i}", prompt, SamplingParams(max_tokens=400, temperature=0.0))
    eng.step()  # every prompt prefilled: the batch is full from here
    engine_ms = _median_ms(eng.step)
    assert eng.active() == batch

    from transformers import DynamicCache

    cache = DynamicCache()
    ids = torch.randint(0, 8192, (batch, 33))
    with torch.inference_mode():
        eng.model(input_ids=ids, cache=cache, use_cache=True)
        bare_ms = _median_ms(lambda: eng.model(input_ids=ids[:, :1], cache=cache, use_cache=True))
    print(
        f"\ntiny:4x256 batch {batch}: engine step {engine_ms:.2f} ms, bare forward {bare_ms:.2f} ms"
    )
