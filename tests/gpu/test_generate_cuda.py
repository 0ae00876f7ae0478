"""HFEngine on CUDA: 64 slots of the tiny model in bf16 and fp32, against
transformers' generate() on the same device, and the KV budget checked against
free device memory."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from sluice.generate.params import SamplingParams
from sluice.generate.tiny import ensure_tiny
from tests.kit.cuda import needs_cuda
from workers.generate.engine import StepOutput
from workers.generate.hf_engine import HFEngine

pytestmark = [needs_cuda, pytest.mark.system]
SPEC = "tiny:4x256"
SLOTS = 64
NEW_TOKENS = 16


def prompts() -> list[tuple[int, ...]]:
    gen = torch.Generator().manual_seed(3)
    return [
        tuple(torch.randint(1, 8192, (int(n),), generator=gen).tolist())
        for n in torch.randint(1, 200, (SLOTS,), generator=gen)
    ]


def reference(dtype: torch.dtype, prompt: tuple[int, ...]) -> list[int]:
    model = _model(dtype)
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt], device="cuda"),
            attention_mask=torch.ones((1, len(prompt)), dtype=torch.long, device="cuda"),
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            pad_token_id=0,
        )
    new = out[0, len(prompt) :].tolist()
    return new[: new.index(0)] if 0 in new else new


_MODELS: dict[torch.dtype, Any] = {}


def _model(dtype: torch.dtype) -> Any:
    if dtype not in _MODELS:
        from transformers import AutoModelForCausalLM

        m = AutoModelForCausalLM.from_pretrained(ensure_tiny(SPEC))
        _MODELS[dtype] = m.to(device="cuda", dtype=dtype).eval()
    return _MODELS[dtype]


def run_staggered(eng: HFEngine, ps: list[tuple[int, ...]]) -> dict[str, list[StepOutput]]:
    """Eight sequences join per step, so the batch changes shape while it decodes."""
    outs: dict[str, list[StepOutput]] = {}
    pending = list(enumerate(ps))
    for _ in range(1000):
        for i, p in pending[:8]:
            eng.add(f"s{i}", p, SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0))
        pending = pending[8:]
        for o in eng.step():
            outs.setdefault(o.seq_id, []).append(o)
        if not pending and not eng.active():
            return outs
    raise AssertionError("the engine did not finish")


def test_fp32_greedy_on_cuda_equals_generate_with_64_slots() -> None:
    # fp32 (TF32 off for matmuls by default): batch shape changes only the
    # last bits, far below the tiny model's logit gaps
    eng = HFEngine(ensure_tiny(SPEC), SLOTS, 512, 256, dtype="float32", device="cuda")
    ps = prompts()
    outs = run_staggered(eng, ps)
    for i, p in enumerate(ps):
        got = [t for o in outs[f"s{i}"] for t in o.token_ids]
        assert got == reference(torch.float32, p), f"sequence {i}"
    assert next(eng.model.parameters()).is_cuda
    eng.close()


def test_bf16_with_64_slots_runs_on_the_device_and_starts_like_generate() -> None:
    # bf16 keeps 2-3 significant digits: a batch of 64 rounds differently from
    # generate() alone and later tokens may part ways at a near-tie. The first
    # token comes from a one-chunk prefill of the same shape as generate()'s, so
    # it must agree; every sequence must run to its length.
    eng = HFEngine(ensure_tiny(SPEC), SLOTS, 512, 256, dtype="bfloat16", device="cuda")
    assert next(eng.model.parameters()).dtype == torch.bfloat16
    ps = prompts()
    outs = run_staggered(eng, ps)
    agree = 0
    for i, p in enumerate(ps):
        got = [t for o in outs[f"s{i}"] for t in o.token_ids]
        want = reference(torch.bfloat16, p)
        assert got[:1] == want[:1], f"sequence {i}'s first token"
        assert len(got) == NEW_TOKENS or outs[f"s{i}"][-1].finished == "stop"
        agree += got == want
    print(f"bf16: {agree}/{SLOTS} sequences equal generate() token for token")
    eng.close()


def test_a_kv_budget_the_device_cannot_hold_is_refused_clearly() -> None:
    free, _ = torch.cuda.mem_get_info()
    per_token = 2 * 4 * 256 * 2  # k and v, 4 layers, width 256, bf16
    slots = int(free // (1024 * per_token)) + 1  # over free memory at 1024 tokens each
    with pytest.raises(ValueError, match=r"KV cache for \d+ slots .* at most \d+ slots fit"):
        HFEngine(ensure_tiny(SPEC), slots, 1024, 256, dtype="bfloat16", device="cuda")
