"""A generative model's section (``models.<name>.generate``): present means the
model answers token by token (ADR 0144). Its worker has slots, not batches."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sluice.config.base import StrictModel


class GenerateConfig(StrictModel):
    # Sequences one worker decodes at once (its slots). Each decode step claims up to
    # the free slots in the round trip that stores the step's tokens.
    slots: int = Field(16, gt=0, le=1024)
    # A slot's KV budget in tokens: a job whose prompt plus max_tokens exceeds it can
    # never run and is refused at submit.
    max_seq_tokens: int = Field(1024, gt=1)
    # Prompt tokens one step may prefill (longer prompts are chunked), so a long
    # prompt never stalls the sequences already decoding for more than one chunk.
    prefill_tokens_per_step: int = Field(256, gt=0)
    # max_tokens when a request names none; never above max_seq_tokens - prompt.
    default_max_tokens: int = Field(256, gt=0)
    # continuous: claim into free slots every step. whole_batch: claim a batch into
    # empty slots and claim again only when all of it has ended (the baseline the
    # benchmark compares against; never the better choice in production).
    admission: Literal["continuous", "whole_batch"] = "continuous"
    # Entries kept per job stream (XADD MAXLEN ~): far above a job's step count.
    stream_maxlen: int = Field(4096, gt=0)
    # The prior for a job's output length before any job of the model has finished
    # (the admission cost is prompt + expected output, never above max_tokens).
    expected_output_tokens: int = Field(64, gt=0)

    @model_validator(mode="after")
    def _fits(self) -> GenerateConfig:
        if self.default_max_tokens >= self.max_seq_tokens:
            raise ValueError(
                f"generate.default_max_tokens ({self.default_max_tokens}) must be below "
                f"generate.max_seq_tokens ({self.max_seq_tokens}): no prompt would fit"
            )
        return self
