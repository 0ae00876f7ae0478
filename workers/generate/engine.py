"""The interface every generation engine sits behind (ADR 0144).

The slot loop owns the queue side; an engine owns decoding. Each ``step`` runs one
decode step for every active sequence and may prefill new ones within its prompt
budget; it returns what each sequence produced. The built-in engine is
``workers.generate.hf_engine`` (any ``AutoModelForCausalLM``); one with its own
continuous batching (vLLM's async engine) sits behind the same methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sluice.generate.params import FinishReason, SamplingParams


class EngineDead(Exception):
    """The engine failed as a whole and can run nothing more (``add`` after its
    core died). Not a RuntimeError: the slot loop reads RuntimeError from ``add``
    as "no slot free"; this one is an engine failure (its jobs are given back and
    the worker's failure streak counts it, ADR 0147)."""


@dataclass(frozen=True, slots=True)
class StepOutput:
    """What one sequence produced in one step. ``token_ids`` may be empty (a prompt
    still prefilling, or a step whose tokens are held back as a possible start of a
    stop sequence); ``finished`` is set once, on its last output."""

    seq_id: str
    token_ids: tuple[int, ...]
    text: str  # the text these tokens add
    finished: FinishReason | None = None
    error: str | None = None


class Engine(Protocol):
    """A batch of sequences decoded together, at most ``slots`` at once."""

    @property
    def slots(self) -> int: ...

    def add(self, seq_id: str, prompt_ids: Sequence[int], params: SamplingParams) -> None:
        """Admit a sequence (prefilled in the next steps). Raises ValueError when it
        can never fit (prompt + max_tokens above the KV budget), RuntimeError
        when no slot is free and EngineDead once the engine has failed as a whole."""

    def abort(self, seq_id: str) -> None:
        """Drop a sequence now (cancelled, lease lost); its slot is free at once. No
        output follows for it. Unknown ids are ignored."""

    def step(self) -> list[StepOutput]:
        """One decode step for every active sequence (and prefill within the step's
        prompt budget). Returns one output per sequence that produced tokens or
        finished. Raises when the engine failed as a whole (the loop gives every
        sequence back); an output's ``error`` is one sequence's failure (retried)."""

    def active(self) -> int:
        """Sequences holding a slot."""

    def close(self) -> None:
        """Free the model and its caches."""
