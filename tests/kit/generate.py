"""Generative-model helpers shared by tests: the reference a decoding engine is
held to."""

from __future__ import annotations

import torch
import transformers

from sluice.generate.tiny import resolve_model_dir


def greedy_reference(
    spec: str, prompt: list[int], max_tokens: int, dtype: torch.dtype = torch.float32
) -> list[int]:
    """transformers' ``generate()`` alone on the model ``spec`` names, greedy, in
    ``dtype``, cut at EOS (an engine ends there without emitting it)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(resolve_model_dir(spec), dtype=dtype)
    model = model.eval()
    eos = model.generation_config.eos_token_id
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones((1, len(prompt)), dtype=torch.long),
            max_new_tokens=max_tokens,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=0,
        )
    new: list[int] = out[0, len(prompt) :].tolist()
    return new[: new.index(eos)] if eos in new else new
