"""OpenAI's completions and chat completions over generative jobs: what a request
becomes (a generative job's input), and what a job's result or stream becomes
(OpenAI's responses and ``chat.completion.chunk`` / ``text_completion`` chunks).

Pure: no Redis, no clock (``created`` is passed in). The routes are
gateway.routers.generate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.generate_schemas import ChatCompletionRequest, CompletionRequest
from sluice.errors import InvalidInput
from sluice.generate.params import GenerateResult


class UnsupportedParam(InvalidInput):
    """A request field Sluice does not serve (400 under OpenAI's paths, with ``param``)."""

    type = "unsupported_parameter"

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param


class NotGenerative(InvalidInput):
    """The named model has no ``generate:`` section (400 under OpenAI's paths)."""

    type = "model_not_generative"
    param = "model"


def _refuse_common(body: CompletionRequest | ChatCompletionRequest) -> None:
    if body.n != 1:
        raise UnsupportedParam("n", "only 1 choice per request; send n requests instead")
    if body.logprobs not in (None, False, 0):
        raise UnsupportedParam("logprobs", "log probabilities are not returned")
    if body.logit_bias:
        raise UnsupportedParam("logit_bias", "not supported")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(body, name) != 0:
            raise UnsupportedParam(name, "not supported (only 0)")
    if body.stream_options is not None and not body.stream:
        raise UnsupportedParam("stream_options", "only with stream: true")


def _refuse_chat(body: ChatCompletionRequest) -> None:
    if body.top_logprobs:
        raise UnsupportedParam("top_logprobs", "log probabilities are not returned")
    if body.tools or body.functions:
        raise UnsupportedParam(
            "tools" if body.tools else "functions", "tool calls are not supported"
        )
    for name in ("tool_choice", "function_call"):
        if getattr(body, name) not in (None, "none"):
            raise UnsupportedParam(name, "tool calls are not supported")
    fmt = body.response_format
    if fmt is not None and fmt.get("type") != "text":
        raise UnsupportedParam("response_format", "only {'type': 'text'}")
    if body.store:
        raise UnsupportedParam("store", "completions are not stored")
    if body.max_tokens is not None and body.max_completion_tokens is not None:
        if body.max_tokens != body.max_completion_tokens:
            raise UnsupportedParam(
                "max_completion_tokens", "differs from max_tokens; send one of them"
            )


def prompt_text(value: Any) -> str:
    """``prompt`` as one string: a string, or a list of exactly one."""
    if isinstance(value, list):
        if len(value) != 1:
            raise UnsupportedParam(
                "prompt", f"{len(value)} prompts; send one prompt per request (a string)"
            )
        value = value[0]
    if isinstance(value, int) or (isinstance(value, list) and value):
        raise UnsupportedParam("prompt", "token arrays are not supported; send the text")
    if not isinstance(value, str) or not value:
        raise InvalidInput("prompt: must be a non-empty string")
    return value


def _sampling(
    body: CompletionRequest | ChatCompletionRequest, max_tokens: int | None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if max_tokens is not None:
        out["max_tokens"] = max_tokens
    for name in ("temperature", "top_p", "top_k", "seed", "stop"):
        value = getattr(body, name)
        if value is not None:
            out[name] = value
    return out


def completion_input(body: CompletionRequest) -> dict[str, Any]:
    """The generative job's input (the jobs API's shape) for a completions request."""
    _refuse_common(body)
    if body.echo:
        raise UnsupportedParam("echo", "the prompt is not echoed")
    if body.suffix:
        raise UnsupportedParam("suffix", "insertion is not supported")
    if body.best_of not in (None, 1):
        raise UnsupportedParam("best_of", "only 1")
    return {"prompt": prompt_text(body.prompt), **_sampling(body, body.max_tokens)}


def chat_input(body: ChatCompletionRequest) -> dict[str, Any]:
    """The generative job's input for a chat completions request."""
    _refuse_common(body)
    _refuse_chat(body)
    limit = (
        body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    )
    return {"messages": body.messages, **_sampling(body, limit)}


def finish_reason(result: GenerateResult) -> str:
    return "length" if result.finish_reason == "length" else "stop"


def usage(result: GenerateResult) -> dict[str, int]:
    return {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "total_tokens": result.prompt_tokens + result.completion_tokens,
    }


@dataclass(frozen=True, slots=True)
class Reply:
    """Who a response or chunk is for: its id, model, creation time, and shape."""

    id: str
    model: str
    created: int
    chat: bool

    def base(self, chunk: bool) -> dict[str, Any]:
        if self.chat:
            kind = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            kind = "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}


def reply_for(job_id: str, model: str, created: int, chat: bool) -> Reply:
    return Reply(("chatcmpl-" if chat else "cmpl-") + job_id, model, created, chat)


def response(reply: Reply, result: GenerateResult) -> dict[str, Any]:
    """The non-streaming answer."""
    reason = finish_reason(result)
    if reply.chat:
        message = {"role": "assistant", "content": result.text}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": reason}
    else:
        choice = {"text": result.text, "index": 0, "logprobs": None, "finish_reason": reason}
    return {**reply.base(False), "choices": [choice], "usage": usage(result)}


def chunk(
    reply: Reply, text: str | None, reason: str | None = None, *, role: bool = False
) -> dict[str, Any]:
    """One streamed chunk: new text (None: none), a finish reason on the last."""
    if reply.chat:
        delta: dict[str, Any] = {"role": "assistant"} if role else {}
        if text is not None:
            delta["content"] = text
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
    else:
        choice = {"text": text or "", "index": 0, "logprobs": None, "finish_reason": reason}
    return {**reply.base(True), "choices": [choice]}


def usage_chunk(reply: Reply, result: GenerateResult) -> dict[str, Any]:
    """stream_options.include_usage: the last chunk, no choices, the usage."""
    return {**reply.base(True), "choices": [], "usage": usage(result)}
