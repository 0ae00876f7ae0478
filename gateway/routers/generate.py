"""OpenAI-compatible ``POST /v1/completions`` and ``POST /v1/chat/completions``.

Each request is one generative job of the named model, submitted like
``POST /v1/models/{model}/jobs`` (admission, priorities, API-key limits,
idempotency and metrics are the jobs API's). Without ``stream`` the route waits
for the job (up to ``gateway.predict_timeout_s``; a job not done by then is
cancelled unless an Idempotency-Key lets a retry wait on it: 504). With
``stream`` it answers OpenAI's SSE chunks from the job's token stream (the
token hub), then ``data: [DONE]``; across a worker restart no text is sent twice.
A stream refused (429 at the hub's cap, 503) makes no job, and one that fails
before its response starts cancels its job: a retry never leaves an orphan.
Errors are OpenAI's shape (gateway.errors); what is refused is listed in
gateway.generate_schemas.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from gateway import openai_generate as oa
from gateway import service
from gateway.deps import Caller, IdempotencyKey, State
from gateway.generate_schemas import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
)
from gateway.responses import Json
from gateway.routers.embeddings import check_ended
from gateway.routers.stream import ListenerResponse
from gateway.schemas import openai_errors
from gateway.state import GatewayState
from gateway.strict_json import StrictJsonRoute
from gateway.token_hub import Listener
from gateway.token_stream import job_entries
from sluice import fastjson
from sluice.apikeys import ApiKey
from sluice.errors import JobConflict, JobNotFound, SluiceError, TimedOut
from sluice.generate.params import GenerateResult
from sluice.generate.stream import Follower, parse_entry
from sluice.jobs import JobRecord

router = APIRouter(prefix="/v1", tags=["openai"], route_class=StrictJsonRoute)
SSE_DOC: dict[str, Any] = {"content": {"text/event-stream": {}}, "description": "stream: true"}
ERRORS = openai_errors(400, 401, 403, 404, 409, 413, 415, 429, 502, 503, 504)
Body = CompletionRequest | ChatCompletionRequest


def _check_generative(st: GatewayState, model: str) -> None:
    if not st.model(model).generative:
        raise oa.NotGenerative(
            f"model {model!r} does not generate text (no generate: section in its config)"
        )


async def _submit(
    st: GatewayState, body: Body, job_input: dict[str, Any], key: ApiKey | None, idem: str | None
) -> str:
    _check_generative(st, body.model)
    owner = key.owner if key else None
    digest = service.request_hash(body) if idem is not None else ""
    spec = service.Spec(body.priority, body.deadline_ms, None, idem, owner, request_hash=digest)
    views, _ = await service.submit(st, body.model, [job_input], spec)
    return str(views[0]["id"])


async def _wait(st: GatewayState, job_id: str, owner: str | None, keep: bool) -> JobRecord:
    limit = st.gw.predict_timeout_s
    rec = await service.wait(st, job_id, limit, owner)
    if not rec.status.terminal:
        if not keep:
            with contextlib.suppress(JobConflict, JobNotFound):
                await service.cancel(st, job_id, owner)
        again = " (retry with the same Idempotency-Key to wait on it)" if keep else ""
        raise TimedOut(f"not done after {limit:g} s (gateway.predict_timeout_s){again}")
    check_ended([rec])
    return rec


async def _answer(
    st: GatewayState, body: Body, job_input: dict[str, Any], key: ApiKey | None, idem: str | None
) -> Json | StreamingResponse:
    if body.stream:
        return await _open_stream(st, body, job_input, key, idem)
    job_id = await _submit(st, body, job_input, key, idem)
    owner = key.name if key else None
    reply = oa.reply_for(
        job_id, body.model, int(time.time()), isinstance(body, ChatCompletionRequest)
    )
    rec = await _wait(st, job_id, owner, idem is not None)
    result = GenerateResult.from_dict(rec.result)
    return Json(oa.response(reply, result), headers={"Location": f"/v1/jobs/{job_id}"})


async def _open_stream(
    st: GatewayState, body: Body, job_input: dict[str, Any], key: ApiKey | None, idem: str | None
) -> ListenerResponse:
    """A streaming answer whose refusals all come before the job exists, or cancel it.

    The hub's slot is taken first (429 past its cap, 503 while shutting down), so a
    refused stream leaves no job behind for a retry to duplicate. A failure between
    the submit and the response (the job's read: 503 when Redis is unavailable)
    cancels the job, unless an Idempotency-Key lets the retry find it again.
    """
    _check_generative(st, body.model)
    listener = st.tokens.join(body.model, "")  # the job's id is bound once submitted
    owner = key.name if key else None
    job_id = ""
    try:
        job_id = await _submit(st, body, job_input, key, idem)
        listener.job_id = job_id
        rec = await service.get(st, job_id, owner)
    except BaseException:
        st.tokens.leave(listener)
        if job_id and idem is None:
            with contextlib.suppress(Exception):
                await service.cancel(st, job_id, owner)
        raise
    chat = isinstance(body, ChatCompletionRequest)
    reply = oa.reply_for(job_id, body.model, int(time.time()), chat)
    usage = body.stream_options is not None and body.stream_options.include_usage
    return ListenerResponse(st, _chunks(st, listener, rec, reply, owner, usage), listener)


def _data(obj: Any) -> bytes:
    return b"data: " + fastjson.dumps(obj).encode() + b"\n\n"


def _error_chunk(error: dict[str, Any]) -> bytes:
    message = str(error.get("message") or error.get("status") or "the job failed")
    code = str(error.get("type") or error.get("status") or "model_failed")
    kind = "server_error"
    return _data({"error": {"message": message, "type": kind, "param": None, "code": code}})


async def _chunks(
    st: GatewayState,
    listener: Listener,
    rec: JobRecord,
    reply: oa.Reply,
    owner: str | None,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    """OpenAI's chunks from the job's stream: the role first (chat), new text only,
    the finish reason, the usage when asked, then [DONE]."""
    follower = Follower()
    if reply.chat:
        yield _data(oa.chunk(reply, "", role=True))
    try:
        async for batch in job_entries(st, listener, rec, "0-0", owner):
            if not batch:
                yield b": keep-alive\n\n"
            for entry_id, fields in batch:
                text = "".join(d.text for d in follower.feed(parse_entry(entry_id, fields)))
                if text:
                    yield _data(oa.chunk(reply, text))
    except SluiceError as e:  # a catch-up read failed: the client sees an error, not [DONE]
        yield _error_chunk({"type": e.type, "message": str(e)})
        return
    if follower.result is not None:
        result = GenerateResult.from_dict(follower.result)
        yield _data(oa.chunk(reply, None, oa.finish_reason(result)))
        if include_usage:
            yield _data(oa.usage_chunk(reply, result))
        yield b"data: [DONE]\n\n"
    elif follower.error is not None:
        yield _error_chunk(_error_of(follower.error))
    else:  # cut by the hub (shutdown, a slow client): no [DONE], so the client knows
        cut = f"the stream was cut; GET /v1/jobs/{rec.id} reads the result"
        yield _error_chunk({"type": "stream_interrupted", "message": cut})


def _error_of(raw: str) -> dict[str, Any]:
    try:
        err = json.loads(raw)
    except ValueError:
        err = None
    return err if isinstance(err, dict) else {"message": raw}


@router.post(
    "/completions",
    response_class=Json,
    responses={200: {"model": CompletionResponse, **SSE_DOC}, **ERRORS},
)
async def create_completion(
    body: CompletionRequest, st: State, key: Caller, idempotency_key: IdempotencyKey = None
) -> Any:
    """OpenAI's completions: ``model`` is a generative Sluice model, ``prompt`` one string."""
    return await _answer(st, body, oa.completion_input(body), key, idempotency_key)


@router.post(
    "/chat/completions",
    response_class=Json,
    responses={200: {"model": ChatCompletionResponse, **SSE_DOC}, **ERRORS},
)
async def create_chat_completion(
    body: ChatCompletionRequest, st: State, key: Caller, idempotency_key: IdempotencyKey = None
) -> Any:
    """OpenAI's chat completions: the model's chat template makes the prompt."""
    return await _answer(st, body, oa.chat_input(body), key, idempotency_key)
