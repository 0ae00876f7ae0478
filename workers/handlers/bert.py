"""A BERT encoder built from its ``config.json`` and ``model.safetensors`` alone.

The embedding handler's fast start path (docs/adr/0130): no ``transformers``
import (1.5-2 s here) and no ``AutoModel.from_pretrained`` (3-4 s more, most of it
more imports), just torch modules named like Hugging Face's ``BertModel`` so its
safetensors file loads by name. The module is built on the ``meta`` device and
the weights are assigned straight from the file (memory-mapped, or read onto
the GPU by safetensors), so nothing is initialised only to be overwritten.

Scope: ``model_type: bert`` with absolute positions and an exact-GELU feed-forward
(all-MiniLM-L6-v2 and the other sentence-transformers BERTs). Anything else goes
through ``transformers`` (the handler decides, :func:`supported`).

A padded batch runs unpadded (docs/adr/0170): every layer's dense parts (the
projections, the feed-forward, the LayerNorms: nearly all of a small BERT's
work) run on the batch's real tokens packed into one ``[tokens, hidden]`` matrix,
and only attention sees the padded ``[batch, heads, length, head]`` layout, with
its mask. A batch of mixed lengths then costs what its tokens cost, not its row
count times its longest row.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 - torch's own convention

WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"
# Where the encoder's weights may sit: BertModel's own names, or under "bert." as a
# BertFor* model (BertForMaskedLM, ...) saves them; transformers strips that too.
PREFIXES = ("", "bert.")


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float

    @classmethod
    def read(cls, model_dir: Path) -> BertConfig:
        raw = json.loads((model_dir / "config.json").read_text())
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__})


def supported(model_dir: Path) -> str | None:
    """None if this module can run the model in ``model_dir``, else why not."""
    cfg_path = model_dir / "config.json"
    if not cfg_path.is_file():
        return "no config.json"
    raw = json.loads(cfg_path.read_text())
    if raw.get("model_type") != "bert":
        return f"model_type {raw.get('model_type')!r} is not bert"
    if raw.get("position_embedding_type", "absolute") != "absolute":
        return f"position_embedding_type {raw.get('position_embedding_type')!r}"
    if raw.get("hidden_act", "gelu") != "gelu":
        return f"hidden_act {raw.get('hidden_act')!r}"
    for name in (WEIGHTS, TOKENIZER):
        if not (model_dir / name).is_file():
            return f"no {name}"
    missing = [k for k in BertConfig.__dataclass_fields__ if k not in raw]
    if missing:
        return f"config.json lacks {missing}"
    return _weights_why_not(model_dir)


def _weights_why_not(model_dir: Path) -> str | None:
    """Reads only the safetensors header: None if the file holds every weight the
    encoder needs under one of PREFIXES, else why not (auto then uses transformers)."""
    from safetensors import safe_open

    try:
        with safe_open(str(model_dir / WEIGHTS), framework="pt") as f:
            names = set(f.keys())
    except Exception as e:  # noqa: BLE001 - any unreadable file: let transformers try
        return f"{WEIGHTS} unreadable ({e})"
    expected = encoder_names(BertConfig.read(model_dir))
    if weights_prefix(names, expected) is None:
        example = sorted(expected - names)[:3]
        return f"{WEIGHTS} lacks encoder weights such as {example} (with or without 'bert.')"
    return None


def encoder_names(c: BertConfig) -> set[str]:
    """The parameter names :class:`BertEncoder` loads (built on meta: no memory)."""
    with torch.device("meta"):
        return set(BertEncoder(c).state_dict())


def weights_prefix(names: Iterable[str], expected: set[str]) -> str | None:
    """The first of PREFIXES under which ``names`` hold all of ``expected``, or None."""
    have = set(names)
    for prefix in PREFIXES:
        if all(prefix + k in have for k in expected):
            return prefix
    return None


@dataclass(frozen=True)
class Packing:
    """Where a padded batch's real tokens sit: the rows of the ``[batch x length]``
    positions that the attention mask keeps (``index``; None when every position
    is real, and packing is the identity), and the mask in SDPA's form."""

    batch: int
    length: int
    index: torch.Tensor | None
    mask: torch.Tensor  # [batch, 1, 1, length], True = attend: shared by heads and queries

    @classmethod
    def of(cls, attention_mask: torch.Tensor, unpadded: bool = True) -> Packing:
        """``unpadded=False``: the identity whatever the mask (every position computed,
        as before ADR 0170; ``sluice bench padding`` compares the two)."""
        b, n = attention_mask.shape
        keep = attention_mask.bool()
        index = None
        if unpadded and not bool(keep.all()):
            index = keep.reshape(-1).nonzero().squeeze(1)
        return cls(b, n, index, keep[:, None, None, :])

    def unpad(self, t: torch.Tensor) -> torch.Tensor:
        """``[batch x length, ...]`` -> the real tokens' rows ``[tokens, ...]``."""
        return t if self.index is None else t.index_select(0, self.index)

    def pad(self, t: torch.Tensor) -> torch.Tensor:
        """``[tokens, ...]`` -> ``[batch x length, ...]``, zeros at padding positions."""
        if self.index is None:
            return t
        out = t.new_zeros((self.batch * self.length, *t.shape[1:]))
        return out.index_copy_(0, self.index, t)


class _SelfAttention(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.heads = c.num_attention_heads
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)

    def forward(self, x: torch.Tensor, pack: Packing) -> torch.Tensor:
        """``x``: the packed tokens ``[tokens, hidden]``; attention runs padded."""
        b, n, d = pack.batch, pack.length, x.shape[-1]

        def split(t: torch.Tensor) -> torch.Tensor:
            return pack.pad(t).view(b, n, self.heads, d // self.heads).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            split(self.query(x)), split(self.key(x)), split(self.value(x)), attn_mask=pack.mask
        )
        return pack.unpad(out.transpose(1, 2).reshape(b * n, d))


class _DenseNorm(nn.Module):
    """Hugging Face's BertSelfOutput / BertOutput: dense, residual, LayerNorm."""

    def __init__(self, c: BertConfig, d_in: int) -> None:
        super().__init__()
        self.dense = nn.Linear(d_in, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)  # noqa: N815

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class _Attention(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.add_module("self", _SelfAttention(c))  # the checkpoint's name
        self.output = _DenseNorm(c, c.hidden_size)

    def forward(self, x: torch.Tensor, pack: Packing) -> torch.Tensor:
        attend: nn.Module = self._modules["self"]  # type: ignore[assignment]
        return self.output(attend(x, pack), x)


class _Intermediate(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))


class _Layer(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.attention = _Attention(c)
        self.intermediate = _Intermediate(c)
        self.output = _DenseNorm(c, c.intermediate_size)

    def forward(self, x: torch.Tensor, pack: Packing) -> torch.Tensor:
        a = self.attention(x, pack)
        return self.output(self.intermediate(a), a)


class _Encoder(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(_Layer(c) for _ in range(c.num_hidden_layers))


def _embedding(n: int, d: int) -> nn.Embedding:
    # An empty weight skips the random init (on meta it pulls in torch._refs: ~2 s).
    return nn.Embedding(n, d, _weight=torch.empty(n, d))


class _Embeddings(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = _embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = _embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = _embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)  # noqa: N815

    def forward(self, ids: torch.Tensor, types: torch.Tensor, pack: Packing) -> torch.Tensor:
        """The packed tokens' embeddings, ``[tokens, hidden]`` (absolute positions:
        a token's column in the padded batch)."""
        pos = torch.arange(pack.length, device=ids.device).expand(pack.batch, -1)
        ids, types, pos = (pack.unpad(t.reshape(-1)) for t in (ids, types, pos))
        x = self.word_embeddings(ids) + self.position_embeddings(pos)
        return self.LayerNorm(x + self.token_type_embeddings(types))


class BertEncoder(nn.Module):
    """``last_hidden_state`` of Hugging Face's ``BertModel`` (no pooler)."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.config = c
        self.unpadded = True  # False: compute padding positions too (a benchmark's baseline)
        self.embeddings = _Embeddings(c)
        self.encoder = _Encoder(c)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        types = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
        pack = Packing.of(attention_mask, self.unpadded)
        x = self.embeddings(input_ids, types, pack)
        for layer in self.encoder.layer:
            x = layer(x, pack)
        # Padded again for the caller (padding positions hold zeros: pooling masks them).
        return pack.pad(x).view(pack.batch, pack.length, -1)


def load(model_dir: Path, device: str, dtype: torch.dtype | None) -> tuple[BertEncoder, float]:
    """The encoder with its weights on ``device`` (in ``dtype``), and the seconds the
    weights took to read (the rest of the caller's time is the cast/copy)."""
    import time

    from safetensors.torch import load_file

    c = BertConfig.read(model_dir)
    with torch.device("meta"):
        model = BertEncoder(c)
    t0 = time.perf_counter()
    # Read onto the device directly (CPU: a memory map; CUDA: safetensors copies there).
    state: dict[str, Any] = load_file(str(model_dir / WEIGHTS), device=device)
    read_s = time.perf_counter() - t0
    keep = set(model.state_dict())
    prefix = weights_prefix(state, keep)
    if prefix is None:
        missing = keep - set(state)
        raise ValueError(f"{model_dir / WEIGHTS} lacks {sorted(missing)[:5]}")
    # Dropped: the pooler, position_ids, a BertFor* model's head (e.g. "cls.").
    named = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
    state = {k: v for k, v in named.items() if k in keep}
    model.load_state_dict(state, assign=True)
    if dtype is not None:
        model.to(dtype=dtype)
    return model.eval(), read_s
