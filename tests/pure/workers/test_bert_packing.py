"""The native BERT path runs a padded batch unpadded (workers/handlers/bert.py,
ADR 0170): a sequence's vector does not depend on what shares its batch or how far
the batch is padded, padding positions come back as zeros, and a batch with no
padding skips the packing. A tiny random BERT: no model file, milliseconds each."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import budget
from workers.handlers.bert import BertConfig, BertEncoder, Packing

torch.set_num_threads(1)
TINY = BertConfig(
    vocab_size=50,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=24,
    type_vocab_size=2,
    layer_norm_eps=1e-12,
)


def tiny_bert() -> BertEncoder:
    torch.manual_seed(0)
    model = BertEncoder(TINY)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return model.eval()


MODEL = tiny_bert()


def padded(rows: list[list[int]], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids, mask


def test_packing_is_the_identity_without_padding_and_zeros_padding() -> None:
    full = Packing.of(torch.ones(3, 4, dtype=torch.long))
    assert full.index is None
    x = torch.randn(12, 5)
    assert full.unpad(x) is x and full.pad(x) is x
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    pack = Packing.of(mask)
    assert pack.index is not None and pack.index.tolist() == [0, 1, 3]
    rows = torch.arange(6.0)[:, None]
    assert pack.unpad(rows).squeeze(1).tolist() == [0.0, 1.0, 3.0]
    assert pack.pad(pack.unpad(rows)).squeeze(1).tolist() == [0.0, 1.0, 0.0, 3.0, 0.0, 0.0]
    assert pack.mask.shape == (2, 1, 1, 3) and pack.mask.dtype == torch.bool


@budget(0.3)
@given(
    rows=st.lists(
        st.lists(st.integers(1, TINY.vocab_size - 1), min_size=1, max_size=12),
        min_size=1,
        max_size=5,
    ),
    extra=st.integers(0, 6),
)
def test_a_sequence_gets_the_same_vector_alone_or_in_any_padded_batch(
    rows: list[list[int]], extra: int
) -> None:
    width = max(len(r) for r in rows) + extra
    ids, mask = padded(rows, width)
    with torch.inference_mode():
        out = MODEL(ids, mask)
        for i, row in enumerate(rows):
            alone = MODEL(*padded([row], len(row)))[0]  # no padding: the identity packing
            assert torch.allclose(out[i, : len(row)], alone, atol=1e-5, rtol=1e-4)
            assert not out[i, len(row) :].any()  # padding positions hold zeros
