"""Which engine a generative worker decodes with (ADR 0150).

Owns: the causal-lm handler's ``engine`` param (``hf``, the default, or ``vllm``)
and building the chosen engine from the model's ``generate:`` section. Each engine
module is imported only when chosen, so a worker never imports vLLM unless asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluice.config.generate import GenerateConfig
from sluice.errors import ConfigError
from workers.generate.engine import Engine

ENGINES = ("hf", "vllm")


def make_engine(params: Mapping[str, Any], model_dir: str, gen_cfg: GenerateConfig) -> Engine:
    """The engine the handler's params name, over ``model_dir`` (a Hugging Face
    directory), sized by ``gen_cfg``. Params read: ``engine`` (hf | vllm),
    ``dtype``, ``threads``, ``device`` (hf only) and ``kv_cache_gib`` (vllm only:
    the CPU KV cache vLLM reserves)."""
    name = str(params.get("engine", "hf"))
    threads = int(params.get("threads", 1))
    if name == "hf":
        from workers.generate.hf_engine import HFEngine

        return HFEngine(
            model_dir,
            slots=gen_cfg.slots,
            max_seq_tokens=gen_cfg.max_seq_tokens,
            prefill_tokens_per_step=gen_cfg.prefill_tokens_per_step,
            dtype=str(params.get("dtype", "float32")),
            device=str(params.get("device", "cpu")),
            threads=threads,
        )
    if name == "vllm":
        from workers.generate.vllm_engine import VLLMEngine, VLLMOptions

        options = VLLMOptions(
            slots=gen_cfg.slots,
            max_seq_tokens=gen_cfg.max_seq_tokens,
            prefill_tokens_per_step=gen_cfg.prefill_tokens_per_step,
            dtype=str(params.get("dtype", "float32")),
            threads=threads,
            kv_cache_gib=int(params.get("kv_cache_gib", 1)),
        )
        return VLLMEngine(model_dir, options)
    raise ConfigError(f"handler param engine {name!r}: one of {', '.join(ENGINES)}")
