"""The built-in engine: any Hugging Face causal LM, a KV cache per sequence,
batched decode, chunked prefill (ADR 0144, 0145).

Each ``step`` runs one forward for every decoding sequence together (their
caches packed left-padded in ``BatchKV``), then prefills queued prompts in
admission order, at most ``prefill_tokens_per_step`` prompt tokens in all, one
forward per chunk with the sequence's own cache. A sequence whose prompt is
done gets its first token in that step and joins the decode batch. Greedy rows
compute exactly what ``model.generate()`` computes for the sequence alone (up
to floating-point rounding, which batch shapes change), whatever else runs.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from sluice.errors import ConfigError
from sluice.generate.detok import Delta, IncrementalDetokenizer
from sluice.generate.params import FinishReason, SamplingParams
from sluice.generate.prompt import PromptCodec
from sluice.generate.tiny import resolve_model_dir
from workers.generate.engine import StepOutput
from workers.generate.kv import BatchKV, kv_bytes_per_token, new_cache
from workers.generate.sampling import choose, make_generator

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
# Free device memory the KV budget may take; the rest is activations and the
# allocator's slack.
KV_MEMORY_FRACTION = 0.8


@dataclass(slots=True)
class _Seq:
    seq_id: str
    prompt: list[int]
    params: SamplingParams
    detok: IncrementalDetokenizer
    generator: torch.Generator | None
    cache: Any = None  # its own cache while prefilling
    prefilled: int = 0
    produced: int = 0  # tokens generated (eos not counted)
    next_token: int = -1  # chosen, not yet in the cache
    out: list[StepOutput] = field(default_factory=list)


class HFEngine:
    """``workers.generate.engine.Engine`` over ``AutoModelForCausalLM``."""

    def __init__(
        self,
        model_dir: Path | str,
        slots: int,
        max_seq_tokens: int,
        prefill_tokens_per_step: int,
        dtype: str = "float32",
        device: str = "cpu",
        threads: int | None = None,
    ) -> None:
        if slots < 1 or max_seq_tokens < 2 or prefill_tokens_per_step < 1:
            raise ValueError("slots >= 1, max_seq_tokens >= 2, prefill_tokens_per_step >= 1")
        if dtype not in DTYPES:
            raise ValueError(f"dtype {dtype!r}: one of {sorted(DTYPES)}")
        if threads:
            torch.set_num_threads(threads)
        self._slots = slots
        self.max_seq_tokens = max_seq_tokens
        self.prefill_tokens_per_step = prefill_tokens_per_step
        self.device = torch.device(device)
        self.dtype = DTYPES[dtype]
        self.codec = PromptCodec.load(Path(model_dir))
        self.model = _load_model(Path(model_dir), self.dtype, self.device)
        self._check_positions()
        self._check_kv_memory()
        self._cache_kw = _cache_keyword(self.model)
        self.eos_token_ids = _eos_of(self.model, self.codec)
        self._seqs: dict[str, _Seq] = {}
        self._queue: deque[str] = deque()  # prefilling, admission order
        self._batch = BatchKV(self.device)

    @classmethod
    def from_model_config(cls, model_cfg: Any, device: str = "cpu") -> HFEngine:
        """The engine of a configured ``causal-lm`` model: handler params ``model``
        (a HF directory or ``tiny:<layers>x<width>``), ``dtype``, ``threads``; its
        ``generate`` section's slots and token budgets. Bad settings raise
        ConfigError naming them."""
        gen = model_cfg.generate
        params = model_cfg.params
        if gen is None or not params.get("model"):
            raise ConfigError("a causal-lm model needs params.model and a generate section")
        try:
            return cls(
                resolve_model_dir(str(params["model"])),
                gen.slots,
                gen.max_seq_tokens,
                gen.prefill_tokens_per_step,
                dtype=str(params.get("dtype", "float32")),
                device=device,
                threads=int(params["threads"]) if params.get("threads") else None,
            )
        except ValueError as e:
            raise ConfigError(f"model {params['model']!r}: {e}") from e

    @property
    def slots(self) -> int:
        return self._slots

    def active(self) -> int:
        return len(self._seqs)

    def add(self, seq_id: str, prompt_ids: Sequence[int], params: SamplingParams) -> None:
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id!r} is already running")
        self._check_fits(list(prompt_ids), params)
        if len(self._seqs) >= self._slots:
            raise RuntimeError(f"no free slot ({self._slots} in use)")
        self._seqs[seq_id] = _Seq(
            seq_id,
            list(prompt_ids),
            params,
            self.codec.detokenizer(params.stop),
            make_generator(params, self.device),
        )
        self._queue.append(seq_id)

    def abort(self, seq_id: str) -> None:
        if self._seqs.pop(seq_id, None) is None:
            return
        if seq_id in self._queue:
            self._queue.remove(seq_id)
        self._batch.leave({seq_id})

    def step(self) -> list[StepOutput]:
        outputs: list[StepOutput] = []
        with torch.inference_mode():
            if len(self._batch):
                outputs += self._decode()
            outputs += self._prefill()
        return outputs

    def close(self) -> None:
        self._seqs.clear()
        self._queue.clear()
        self._batch = BatchKV(self.device)
        del self.model
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # --- admission ----------------------------------------------------------

    def _check_fits(self, prompt: list[int], params: SamplingParams) -> None:
        if not prompt:
            raise ValueError("the prompt is empty: at least one token is needed")
        if params.max_tokens < 1:
            raise ValueError(f"max_tokens {params.max_tokens}: at least 1")
        if len(prompt) + params.max_tokens > self.max_seq_tokens:
            raise ValueError(
                f"prompt ({len(prompt)} tokens) + max_tokens ({params.max_tokens}) is above "
                f"this model's max_seq_tokens ({self.max_seq_tokens})"
            )
        vocab = int(self.model.config.vocab_size)
        if min(prompt) < 0 or max(prompt) >= vocab:
            raise ValueError(f"prompt token ids must be in [0, {vocab})")

    def _check_positions(self) -> None:
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit is not None and self.max_seq_tokens > int(limit):
            raise ValueError(
                f"max_seq_tokens ({self.max_seq_tokens}) is above the model's "
                f"max_position_embeddings ({limit})"
            )

    def _check_kv_memory(self) -> None:
        """On CUDA, refuse a KV budget (slots x max_seq_tokens) that free memory
        cannot hold. Twice the budget: a decode step's cache append copies it."""
        if self.device.type != "cuda":
            return
        per_token = kv_bytes_per_token(self.model.config, self.dtype)
        need = 2 * self._slots * self.max_seq_tokens * per_token
        free, _total = torch.cuda.mem_get_info(self.device)
        room = int(free * KV_MEMORY_FRACTION)
        if need > room:
            fits = room // (2 * self.max_seq_tokens * per_token)
            raise ValueError(
                f"KV cache for {self._slots} slots x {self.max_seq_tokens} tokens needs "
                f"{need / 2**30:.2f} GiB, {room / 2**30:.2f} GiB free on {self.device}: "
                f"at most {fits} slots fit"
            )

    # --- decode -------------------------------------------------------------

    def _decode(self) -> list[StepOutput]:
        batch = self._batch
        seqs = [self._seqs[s] for s in batch.rows]
        positions, mask = batch.step_inputs(self.dtype)
        ids = torch.tensor([[s.next_token] for s in seqs], device=self.device)
        logits = self._forward(ids, positions, mask, batch.cache)[:, -1, :]
        batch.stepped()
        chosen = choose(logits, [s.params for s in seqs], [s.generator for s in seqs])
        outputs, ended = [], set()
        for seq, token in zip(seqs, chosen, strict=True):
            out = self._emit(seq, token)
            if out is not None:
                outputs.append(out)
                if out.finished:
                    ended.add(seq.seq_id)
        batch.leave(ended)
        return outputs

    def _forward(
        self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None, cache: Any
    ) -> torch.Tensor:
        kwargs = {self._cache_kw: cache, "use_cache": True, "position_ids": positions}
        if mask is not None:
            kwargs["attention_mask"] = mask
        return self.model(input_ids=ids, **kwargs).logits  # type: ignore[no-any-return]

    # --- prefill ------------------------------------------------------------

    def _prefill(self) -> list[StepOutput]:
        budget = self.prefill_tokens_per_step
        outputs: list[StepOutput] = []
        while self._queue and budget > 0:
            seq = self._seqs[self._queue[0]]
            if seq.cache is None:
                seq.cache = new_cache()
            chunk = seq.prompt[seq.prefilled : seq.prefilled + budget]
            ids = torch.tensor([chunk], device=self.device)
            start = seq.prefilled
            positions = torch.arange(start, start + len(chunk), device=self.device)[None, :]
            logits = self._forward(ids, positions, None, seq.cache)[:, -1, :]
            seq.prefilled += len(chunk)
            budget -= len(chunk)
            if seq.prefilled < len(seq.prompt):
                break  # the budget is spent; this prompt goes on next step
            self._queue.popleft()
            out = self._emit(seq, choose(logits, [seq.params], [seq.generator])[0])
            if out is not None:
                outputs.append(out)
            if out is None or not out.finished:
                self._batch.join(seq.seq_id, seq.cache)
            seq.cache = None
        return outputs

    # --- output -------------------------------------------------------------

    def _emit(self, seq: _Seq, token: int) -> StepOutput | None:
        """Account ``token`` to ``seq``; the output to report, if any. A finished
        sequence leaves ``self._seqs`` here (its batch row by the caller)."""
        finished: FinishReason | None = None
        if token in self.eos_token_ids:
            delta, finished = seq.detok.flush(), "stop"
        else:
            seq.produced += 1
            delta = seq.detok.feed(token)
            if delta.stopped:
                finished = "stop"
            elif seq.produced >= seq.params.max_tokens:
                delta, finished = _joined(delta, seq.detok.flush()), "length"
        seq.next_token = token
        if finished is not None:
            del self._seqs[seq.seq_id]
        if not delta.token_ids and finished is None:
            return None
        return StepOutput(seq.seq_id, delta.token_ids, delta.text, finished)


def _joined(a: Delta, b: Delta) -> Delta:
    return Delta(a.token_ids + b.token_ids, a.text + b.text, a.stopped or b.stopped)


def _load_model(model_dir: Path, dtype: torch.dtype, device: torch.device) -> Any:
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(model_dir)
    return model.to(device=device, dtype=dtype).eval()


def _cache_keyword(model: Any) -> str:
    """transformers 5 names the forward's cache ``cache``; 4.x ``past_key_values``."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _eos_of(model: Any, codec: PromptCodec) -> frozenset[int]:
    """The ids that end a sequence: the generation config's (one or a list),
    else the tokenizer's eos."""
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = codec.eos_token_id
    if eos is None:
        return frozenset()
    return frozenset(int(e) for e in (eos if isinstance(eos, list) else [eos]))
