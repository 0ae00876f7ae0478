"""The decode batch's KV cache: every decoding sequence's keys and values in one
left-padded ``DynamicCache``, re-packed only when a sequence joins or leaves.

Rows are sequences, columns are cache positions aligned on the right: a
sequence shorter than the longest has invalid columns on its left, masked out.
A decode step appends one column for every row (the model's own cache update)
and each row's position id is its own length, so a row computes what it would
alone (ADR 0145). A sequence joins with the cache its chunked prefill built
(``DynamicCache`` of batch 1) and leaves by dropping its row; leading columns no
row uses any more are trimmed.
"""

from __future__ import annotations

from typing import Any

import torch


def new_cache() -> Any:
    from transformers import DynamicCache

    return DynamicCache()


def layers_of(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A DynamicCache's (keys, values) per layer, each [batch, heads, len, dim]."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def _set_layers(cache: Any, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    for layer, (k, v) in zip(cache.layers, kv, strict=True):
        layer.keys, layer.values = k, v


def _left_pad(t: torch.Tensor, cols: int) -> torch.Tensor:
    if cols == 0:
        return t
    pad = t.new_zeros((t.shape[0], t.shape[1], cols, t.shape[3]))
    return torch.cat([pad, t], dim=2)


class BatchKV:
    """The decode batch: row order, validity mask, lengths, and the cache."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._reset()

    def _reset(self) -> None:
        self.rows: list[str] = []
        self.cache: Any = None
        self.valid = torch.zeros((0, 0), dtype=torch.bool, device=self.device)
        self.lengths: list[int] = []  # tokens in the cache per row (= next position id)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def width(self) -> int:
        return int(self.valid.shape[1])

    def join(self, seq_id: str, seq_cache: Any) -> None:
        """Add a sequence whose prefill built ``seq_cache`` (batch 1, no padding)."""
        new = layers_of(seq_cache)
        length = int(new[0][0].shape[2])
        if not self.rows:
            self.cache, self.rows, self.lengths = seq_cache, [seq_id], [length]
            self.valid = torch.ones((1, length), dtype=torch.bool, device=self.device)
            return
        width = max(self.width, length)
        old = layers_of(self.cache)
        merged = [
            (
                torch.cat([_left_pad(k, width - self.width), _left_pad(nk, width - length)]),
                torch.cat([_left_pad(v, width - self.width), _left_pad(nv, width - length)]),
            )
            for (k, v), (nk, nv) in zip(old, new, strict=True)
        ]
        _set_layers(self.cache, merged)
        row = torch.zeros((1, width), dtype=torch.bool, device=self.device)
        row[0, width - length :] = True
        pad = torch.zeros(
            (len(self.rows), width - self.width), dtype=torch.bool, device=self.device
        )
        self.valid = torch.cat([torch.cat([pad, self.valid], dim=1), row])
        self.rows.append(seq_id)
        self.lengths.append(length)

    def leave(self, seq_ids: set[str]) -> None:
        """Drop these rows (finished, aborted) and trim columns no row needs."""
        keep = [i for i, s in enumerate(self.rows) if s not in seq_ids]
        if len(keep) == len(self.rows):
            return
        if not keep:
            self._reset()
            return
        idx = torch.tensor(keep, device=self.device)
        self.rows = [self.rows[i] for i in keep]
        self.lengths = [self.lengths[i] for i in keep]
        start = self.width - max(self.lengths)
        self.valid = self.valid[idx, start:]
        _set_layers(
            self.cache,
            [(k[idx, :, start:], v[idx, :, start:]) for k, v in layers_of(self.cache)],
        )

    def step_inputs(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """position_ids [B, 1] and the additive attention mask [B, 1, 1, width+1]
        for one decode step (the new column is valid for every row)."""
        positions = torch.tensor(self.lengths, device=self.device).unsqueeze(1)
        ones = torch.ones((len(self.rows), 1), dtype=torch.bool, device=self.device)
        valid = torch.cat([self.valid, ones], dim=1)
        mask = torch.zeros(valid.shape, dtype=dtype, device=self.device)
        mask.masked_fill_(~valid, torch.finfo(dtype).min)
        return positions, mask[:, None, None, :]

    def stepped(self) -> None:
        """The model appended one column to every row."""
        ones = torch.ones((len(self.rows), 1), dtype=torch.bool, device=self.device)
        self.valid = torch.cat([self.valid, ones], dim=1)
        self.lengths = [n + 1 for n in self.lengths]


def kv_bytes_per_token(config: Any, dtype: torch.dtype) -> int:
    """Bytes of keys and values one token holds across all layers."""
    layers = int(getattr(config, "num_hidden_layers", 0) or config.n_layer)
    hidden = int(getattr(config, "hidden_size", 0) or config.n_embd)
    heads = int(getattr(config, "num_attention_heads", 0) or config.n_head)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 2 * layers * kv_heads * head_dim * itemsize
