"""Handlers of generative models: what builds a worker's engine (ADR 0147).

A generative model's ``handler`` names an :class:`EngineHandler`; the worker
calls ``load()`` (which builds ``self.engine``) and drives the engine through the
slot loop, never ``collate``/``infer``. The built-in ``causal-lm`` builds the
Hugging Face engine; its params:

- ``model``: a Hugging Face directory, or ``tiny:<layers>x<width>`` (the tiny
  random GPT-2 built from a config with a fixed seed, no download);
- ``dtype``: ``float32`` (default), ``float16`` or ``bfloat16``;
- ``threads``: torch CPU threads (default: the cores the local backend gave this
  worker in ``SLUICE_NUM_THREADS``, else torch's own);
- ``device``: overrides the worker's ``--device`` (``cpu``, ``cuda``, ``cuda:N``).
"""

from __future__ import annotations

import os
import time
from typing import Any

from sluice.cores import THREADS_ENV
from sluice.errors import ConfigError
from sluice.generate.params import SamplingParams
from workers.generate.engine import Engine
from workers.handlers.base import Collated, Handler, HandlerContext

WARMUP_PROMPT = (1, 2, 3, 4)  # token ids any vocabulary has
WARMUP_STEPS_MAX = 64  # a warm-up that has not ended by then is left (aborted)


class EngineHandler(Handler):
    """A generative model's handler: ``load`` builds ``engine``."""

    engine: Engine | None = None

    def build_engine(self) -> Engine:
        raise NotImplementedError

    def load(self) -> None:
        self.engine = self.build_engine()

    def loaded_engine(self) -> Engine:
        if self.engine is None:
            raise RuntimeError("the engine is not loaded")
        return self.engine

    def warm_up_engine(self) -> None:
        """One short greedy sequence through the engine, so the first job's steps
        pay no allocation or first-call cost."""
        engine = self.loaded_engine()
        seq_id = f"warmup-{time.monotonic_ns()}"
        engine.add(seq_id, WARMUP_PROMPT, SamplingParams(max_tokens=2, temperature=0.0))
        for _ in range(WARMUP_STEPS_MAX):
            if any(o.seq_id == seq_id and o.finished for o in engine.step()):
                return
        engine.abort(seq_id)

    def warmup_full_batches(self) -> bool:
        return False

    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        raise TypeError("a generative model runs in the slot loop, not in batches")

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None


class CausalLMHandler(EngineHandler):
    """``causal-lm``: any ``AutoModelForCausalLM`` behind the built-in HF engine, or
    vLLM's (``params.engine: vllm``, where vLLM is installed)."""

    uses_torch = True

    def __init__(self, ctx: HandlerContext) -> None:
        super().__init__(ctx)
        gen = ctx.config.generate
        if gen is None:
            raise ConfigError(
                f"model {ctx.model!r}: handler causal-lm needs a generate: section "
                "(slots, max_seq_tokens, ...)"
            )
        self.gen = gen
        spec = self.params.get("model")
        if not isinstance(spec, str) or not spec:
            raise ConfigError(
                f"model {ctx.model!r}: causal-lm needs params.model "
                "(a Hugging Face directory or tiny:<layers>x<width>)"
            )
        self.spec = spec
        self.dtype = str(self.params.get("dtype", "float32"))
        self.device = str(self.params.get("device") or ctx.device)
        self.threads = int(self.params.get("threads", 0) or os.environ.get(THREADS_ENV) or 0)

    def cpu_threads(self) -> int | None:
        if not self.device.startswith("cpu"):
            return None
        import torch

        return torch.get_num_threads()

    def build_engine(self) -> Engine:
        t0 = time.perf_counter()
        from sluice.generate.tiny import resolve_model_dir
        from workers.generate.engines import make_engine

        self.load_stages["imports"] = time.perf_counter() - t0
        try:
            model_dir = resolve_model_dir(self.spec)
        except (ValueError, OSError) as e:
            raise ConfigError(f"model {self.ctx.model!r}: params.model: {e}") from e
        try:  # params.engine: hf (the built-in, default) or vllm (ADR 0150)
            return make_engine(
                self.params,
                model_dir,
                self.gen,
                device=self.device,
                threads=self.threads or None,
            )
        except ValueError as e:  # a setting the engine refuses (dtype, KV budget)
            raise ConfigError(f"model {self.ctx.model!r}: causal-lm: {e}") from e
