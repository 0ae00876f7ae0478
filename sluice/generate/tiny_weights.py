"""The tiny model's weights and config, written without torch or transformers.

A GPT-2 (``GPT2LMHeadModel``, head tied to the token embeddings) whose every
tensor is drawn by numpy from a generator seeded by the tensor's name, saved as
``model.safetensors`` (the format is a length-prefixed JSON header and the raw
little-endian tensors, written here directly). The core package never imports
torch (tests/pure/repo/test_import_rules.py), and the same bytes come out on every
machine.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np

WEIGHT_SEED = 1234
LAYER_NORM_EPS = 1e-5


def gpt2_config(
    layers: int, width: int, heads: int, vocab: int, n_positions: int, eos: int
) -> dict[str, object]:
    """config.json of a GPT-2 as transformers (and vLLM) read it."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": vocab,
        "n_positions": n_positions,
        "n_ctx": n_positions,
        "n_embd": width,
        "n_layer": layers,
        "n_head": heads,
        "n_inner": None,
        "activation_function": "gelu_new",
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "layer_norm_epsilon": LAYER_NORM_EPS,
        "initializer_range": 0.02,
        "bos_token_id": eos,
        "eos_token_id": eos,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }


def generation_config(eos: int) -> dict[str, object]:
    return {"bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos}


def gpt2_shapes(
    layers: int, width: int, vocab: int, n_positions: int
) -> dict[str, tuple[int, ...]]:
    """Every tensor of GPT2LMHeadModel's checkpoint (Conv1D weights are [in, out];
    the tied head is not stored)."""
    shapes: dict[str, tuple[int, ...]] = {
        "transformer.wte.weight": (vocab, width),
        "transformer.wpe.weight": (n_positions, width),
    }
    for i in range(layers):
        p = f"transformer.h.{i}."
        shapes |= {
            p + "ln_1.weight": (width,),
            p + "ln_1.bias": (width,),
            p + "attn.c_attn.weight": (width, 3 * width),
            p + "attn.c_attn.bias": (3 * width,),
            p + "attn.c_proj.weight": (width, width),
            p + "attn.c_proj.bias": (width,),
            p + "ln_2.weight": (width,),
            p + "ln_2.bias": (width,),
            p + "mlp.c_fc.weight": (width, 4 * width),
            p + "mlp.c_fc.bias": (4 * width,),
            p + "mlp.c_proj.weight": (4 * width, width),
            p + "mlp.c_proj.bias": (width,),
        }
    return shapes | {"transformer.ln_f.weight": (width,), "transformer.ln_f.bias": (width,)}


def init_tensor(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Biases 0, layer-norm scales 1, matrices normal with ``_init_std``."""
    if name.endswith("bias"):
        return np.zeros(shape, dtype=np.float32)
    if len(shape) == 1:
        return np.ones(shape, dtype=np.float32)
    rng = np.random.default_rng(WEIGHT_SEED ^ zlib.crc32(name.encode()))
    return (rng.standard_normal(shape, dtype=np.float32) * _init_std(name, shape)).astype("<f4")


def _init_std(name: str, shape: tuple[int, ...]) -> float:
    """Scales that make every layer matter. With GPT-2's own 0.02 a random model's
    residual stream is its input embedding, and since the head is tied to it (vLLM
    ties GPT-2's head whatever the config says) greedy decoding repeats the last
    token whatever the context, which would hide a broken cache. Conv1D weights
    are [in, out]: 1/sqrt(fan-in) keeps each layer's output O(1), above the
    embeddings; embeddings of 2/sqrt(width) give logits of std about 2."""
    if name.endswith(("wte.weight", "wpe.weight")):
        return 2.0 / shape[1] ** 0.5
    return 1.0 / shape[0] ** 0.5


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The safetensors layout: u64 header size, JSON header (8-byte aligned),
    then the tensors' bytes in header order."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, t in tensors.items():
        header[name] = {
            "dtype": "F32",
            "shape": list(t.shape),
            "data_offsets": [offset, offset + t.nbytes],
        }
        offset += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for t in tensors.values():
            f.write(np.ascontiguousarray(t, dtype="<f4").tobytes())


def write_gpt2(
    out: Path, layers: int, width: int, heads: int, vocab: int, n_positions: int, eos: int
) -> None:
    """config.json, generation_config.json and model.safetensors into ``out``."""
    shapes = gpt2_shapes(layers, width, vocab, n_positions)
    write_safetensors(out / "model.safetensors", {n: init_tensor(n, s) for n, s in shapes.items()})
    for name, data in (
        ("config.json", gpt2_config(layers, width, heads, vocab, n_positions, eos)),
        ("generation_config.json", generation_config(eos)),
    ):
        (out / name).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
