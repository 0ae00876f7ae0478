"""The embedding handler's native BERT path (workers/handlers/bert.py, ADR 0130)
against the transformers path it replaces: the same tokens and the same vectors,
in float32 and bfloat16, with truncation; the loader setting's errors; the start
stages it reports."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from sluice.config import parse_config
from sluice.cost import bundled_model_dir
from sluice.errors import ConfigError
from workers.handlers import HandlerContext, make_handler
from workers.handlers.embedding import EmbeddingHandler

pytestmark = pytest.mark.system
TEXTS = [
    "hello world",
    "Queues balance load; workers pull batches when they have capacity. " * 4,
    "x",
    "Ünïcödé façade naïve — 東京 and émojis 🙂",
    "word " * 700,  # over 512 tokens: truncated, as the transformers path does
    "",
]


def handler(params: dict[str, object]) -> EmbeddingHandler:
    cfg = parse_config({"models": {"e": {"handler": "embedding", "params": params}}})
    h = make_handler(HandlerContext("e", cfg.model("e")))
    assert isinstance(h, EmbeddingHandler)
    h.load()
    return h


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_native_matches_transformers(dtype: str) -> None:
    native, hf = (
        handler({"loader": "native", "dtype": dtype}),
        handler({"loader": "transformers", "dtype": dtype}),
    )
    assert native.native and not hf.native
    a, b = native.collate(TEXTS, [1] * len(TEXTS)), hf.collate(TEXTS, [1] * len(TEXTS))
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        assert torch.equal(a.data[key], b.data[key]), key
    assert (a.padded_tokens, a.real_tokens) == (b.padded_tokens, b.real_tokens)
    assert a.data["input_ids"].shape[1] == 256  # MiniLM's max_seq_length caps the long text
    va, vb = native.infer(a), hf.infer(b)
    cos = torch.nn.functional.cosine_similarity(va, vb, dim=1)
    assert float(cos.min()) > (0.99999 if dtype == "float32" else 0.999)
    if dtype == "float32":
        assert float((va - vb).abs().max()) < 1e-5
    assert next(native.model.parameters()).dtype == getattr(torch, dtype)


def test_auto_picks_native_for_the_bundled_model_and_reports_stages() -> None:
    h = handler({})
    assert h.native
    assert set(h.load_stages) == {"imports", "weights_read", "to_device"}
    assert all(v >= 0 for v in h.load_stages.values())


def test_loader_errors_name_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"models\.e\.params\.loader 'fast'"):
        handler({"loader": "fast"})
    model = tmp_path / "model"
    shutil.copytree(bundled_model_dir(), model)
    cfg = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**cfg, "model_type": "roberta"}))
    with pytest.raises(ConfigError, match="native.*model_type 'roberta' is not bert"):
        handler({"loader": "native", "model_dir": str(model)})
    # auto falls back to transformers for a model the native path cannot run.
    (model / "config.json").write_text(json.dumps({**cfg, "hidden_act": "relu"}))
    cfg_obj = parse_config(
        {"models": {"e": {"handler": "embedding", "params": {"model_dir": str(model)}}}}
    )
    h = make_handler(HandlerContext("e", cfg_obj.model("e")))
    assert isinstance(h, EmbeddingHandler) and h.loader == "transformers"


def tiny_masked_lm(model_dir: Path) -> None:
    """A random two-layer BERT saved as ``BertForMaskedLM``: its weights are named
    ``bert.embeddings...`` / ``bert.encoder...`` (plus the ``cls.`` head), as many
    fine-tuned checkpoints are, with the bundled tokenizer beside them."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=30522,  # the bundled tokenizer's
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertForMaskedLM(cfg).save_pretrained(model_dir, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(bundled_model_dir() / name, model_dir / name)


def test_a_bert_prefixed_checkpoint_loads_and_matches_transformers(tmp_path: Path) -> None:
    from safetensors import safe_open

    tiny_masked_lm(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as f:
        assert "bert.embeddings.word_embeddings.weight" in set(f.keys())
    auto, hf = (
        handler({"model_dir": str(tmp_path)}),
        handler({"model_dir": str(tmp_path), "loader": "transformers"}),
    )
    assert auto.native and not hf.native  # auto takes the native path, which loads it
    texts = TEXTS[:4] + ["word " * 200]  # over 128 positions: truncated by both
    a, b = auto.collate(texts, [1] * len(texts)), hf.collate(texts, [1] * len(texts))
    assert torch.equal(a.data["input_ids"], b.data["input_ids"])
    va, vb = auto.infer(a), hf.infer(b)
    assert va.shape == (len(texts), 32)
    assert float((va - vb).abs().max()) < 1e-5


def test_auto_falls_back_for_weights_the_native_path_lacks(tmp_path: Path) -> None:
    """Names under any other prefix: auto picks transformers, native names the gap."""
    from safetensors.torch import load_file, save_file

    tiny_masked_lm(tmp_path)
    weights = tmp_path / "model.safetensors"
    save_file({"encoder." + k: v for k, v in load_file(str(weights)).items()}, str(weights))
    cfg = parse_config(
        {"models": {"e": {"handler": "embedding", "params": {"model_dir": str(tmp_path)}}}}
    )
    h = make_handler(HandlerContext("e", cfg.model("e")))
    assert isinstance(h, EmbeddingHandler) and h.loader == "transformers"
    with pytest.raises(ConfigError, match="native.*lacks encoder weights"):
        handler({"loader": "native", "model_dir": str(tmp_path)})
