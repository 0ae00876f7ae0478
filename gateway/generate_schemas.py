"""OpenAI's completions and chat completions bodies, as far as Sluice serves them.

Unknown fields are refused (400, ``param`` names it). Fields OpenAI defines that
would change the output and that Sluice does not do (logprobs, echo, suffix,
best_of, logit_bias, penalties, tools, a JSON response format, n > 1) are
accepted only at their neutral value; ``user`` and ``service_tier`` are
accepted and ignored. ``top_k``, ``priority`` and ``deadline_ms`` are Sluice's
own (an OpenAI client sends them in ``extra_body``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.schemas import OpenAIErrorBody, Priority

__all__ = ["OpenAIErrorBody"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamOptions(_Body):
    include_usage: bool = False


class _Common(_Body):
    model: str = Field(..., max_length=64, description="A generative model named in the config.")
    max_tokens: int | None = Field(None, gt=0, strict=True)
    temperature: float | None = Field(None, ge=0, le=2, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    top_k: int | None = Field(None, ge=0, strict=True, description="Sluice's: 0 is no cut.")
    stop: str | list[str] | None = Field(None, description="Up to 4 sequences.")
    seed: int | None = Field(None, ge=0, lt=2**63, strict=True)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, description="Only 1.")
    user: str | None = Field(None, max_length=256, description="Accepted and not used.")
    service_tier: str | None = Field(None, max_length=64, description="Accepted and not used.")
    logprobs: Any = Field(None, description="Refused unless null or false.")
    logit_bias: dict[str, Any] | None = Field(None, description="Refused unless empty.")
    presence_penalty: float = Field(0.0, description="Refused unless 0.")
    frequency_penalty: float = Field(0.0, description="Refused unless 0.")
    priority: Priority = "normal"
    deadline_ms: int | None = Field(None, gt=0, strict=True)


class CompletionRequest(_Common):
    """OpenAI's legacy completions: ``prompt`` is a string (or a list of one)."""

    # Checked in the route, which says what is wrong (token arrays, several prompts).
    prompt: Any = Field(..., description="A string, or a list of one string.")
    echo: bool = Field(False, description="Refused unless false.")
    suffix: str | None = Field(None, description="Refused.")
    best_of: int | None = Field(None, description="Refused unless 1.")


class ChatCompletionRequest(_Common):
    messages: list[dict[str, Any]] = Field(..., min_length=1)
    max_completion_tokens: int | None = Field(None, gt=0, strict=True)
    top_logprobs: int | None = Field(None, description="Refused.")
    tools: list[Any] | None = Field(None, description="Refused unless empty.")
    tool_choice: Any = Field(None, description="Refused unless null or 'none'.")
    parallel_tool_calls: bool | None = Field(None, description="Accepted and not used.")
    functions: list[Any] | None = Field(None, description="Refused unless empty.")
    function_call: Any = Field(None, description="Refused unless null or 'none'.")
    response_format: dict[str, Any] | None = Field(None, description="Only {'type': 'text'}.")
    store: bool | None = Field(None, description="Refused when true: nothing is stored.")


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


FinishReason = Literal["stop", "length"]


class CompletionChoice(BaseModel):
    text: str
    index: int
    logprobs: None = None
    finish_reason: FinishReason | None


class CompletionResponse(BaseModel):
    id: str = Field(description="cmpl- and the job's id (GET /v1/jobs/{id} reads it).")
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ChatMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: ChatMessage
    logprobs: None = None
    finish_reason: FinishReason


class ChatCompletionResponse(BaseModel):
    id: str = Field(description="chatcmpl- and the job's id.")
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
