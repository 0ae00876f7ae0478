"""OpenAI-compatible embeddings: ``POST /v1/embeddings``, on top of the job machinery.

Each input becomes one job of the named model (one submit, so admission,
priorities, API-key limits, idempotency and metrics are the jobs API's); the
route waits for all of them like ``predict`` does and answers in OpenAI's shape.
Errors under this path are OpenAI's shape too (gateway.errors).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import sys
from array import array
from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.types import Scope

from gateway import service
from gateway.auth import caller, header
from gateway.deps import IDEMPOTENCY_DOC
from gateway.responses import Json
from gateway.schemas import EmbeddingsRequest, EmbeddingsResponse, openai_errors
from gateway.state import GatewayState
from gateway.strict_json import StrictJsonRoute
from sluice.config import ModelConfig
from sluice.errors import (
    InvalidInput,
    JobConflict,
    JobNotFound,
    ModelFailed,
    TimedOut,
)
from sluice.jobs import JobRecord, JobStatus

router = APIRouter(prefix="/v1", tags=["openai"], route_class=StrictJsonRoute)


def texts_of(value: Any, limit: int) -> list[str]:
    """The request's ``input`` as a list of non-empty strings, or InvalidInput saying why."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise InvalidInput("input: must be a string or a list of strings")
    if not items:
        raise InvalidInput("input: must not be an empty list")
    if len(items) > limit:
        raise InvalidInput(f"input: {len(items)} items, the limit is {limit}")
    for i, text in enumerate(items):
        if text and type(text) is str:
            continue  # the usual item; what follows names the first wrong one
        where = f"input[{i}]" if len(items) > 1 or not isinstance(value, str) else "input"
        if isinstance(text, int) or (isinstance(text, list) and text):
            raise InvalidInput(f"{where}: token arrays are not supported; send the text")
        if not isinstance(text, str):
            raise InvalidInput(f"{where}: must be a string")
        if not text:
            raise InvalidInput(f"{where}: must not be empty")
    return items


def check_model(name: str, cfg: ModelConfig) -> None:
    """Refuse at once a built-in handler known not to return embeddings (a custom
    handler's results are checked when they arrive)."""
    handler = cfg.handler
    if handler == "tiny" or (handler == "synthetic" and not cfg.params.get("embedding_dim")):
        raise InvalidInput(f"model: {name!r} does not return embeddings (handler {handler!r})")


def encode(vector: list[float], encoding_format: str) -> list[float] | str:
    """``float``: the list; ``base64``: little-endian float32 bytes, as OpenAI sends."""
    if encoding_format == "float":
        return vector
    packed = array("f", vector)
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


_NUMBER_TYPES = frozenset({float, int})


def _numbers(vector: list[Any]) -> bool:
    """Every item an int or float (bools too, as ``isinstance`` says).

    A result is parsed JSON, whose only other values are str, None, lists and dicts,
    each of which ``sum`` refuses with ``TypeError``: so a sum that comes out an int
    or a float proves the vector all numbers, at C speed (a quarter of collecting
    the types for 384 floats, the next cheapest). Anything else (an integer too
    large for a float, a refusal, a type JSON never makes) gets the exact checks.
    """
    try:
        if type(sum(vector)) in _NUMBER_TYPES:
            return True
    except (TypeError, OverflowError):
        pass
    return set(map(type, vector)) <= _NUMBER_TYPES or all(
        isinstance(v, int | float) for v in vector
    )


def vector_of(model: str, rec: JobRecord) -> list[float]:
    result = rec.result
    vector = result.get("embedding") if isinstance(result, dict) else None
    if not isinstance(vector, list) or not _numbers(vector):
        raise ModelFailed(f"model {model!r} returned no embedding (a result without 'embedding')")
    return vector


_STORED_HEAD = '{"embedding":'  # a result of only an embedding, as orjson stores it


def embedding_of(body: EmbeddingsRequest, rec: JobRecord) -> Any:
    """The answer's ``embedding``: checked as numbers, then for ``float`` the stored
    array itself when the result was only that (``orjson.Fragment``: the text orjson
    wrote, so the same bytes its encoding would give), else encoded."""
    vector = vector_of(body.model, rec)
    text = rec.result_json
    if (
        body.encoding_format == "float"
        and text is not None
        and text.startswith(_STORED_HEAD)
        and text.endswith("}")
        and len(rec.result) == 1
    ):
        return orjson.Fragment(text[len(_STORED_HEAD) : -1])
    return encode(vector, body.encoding_format)


def check_ended(recs: list[JobRecord]) -> None:
    """Raise for the first job that did not succeed, naming its input."""
    for i, rec in enumerate(recs):
        if rec.status is JobStatus.SUCCEEDED:
            continue
        where = f"input[{i}]" if len(recs) > 1 else "input"
        error = rec.error or {}
        message = str(error.get("message") or rec.status.value)
        if rec.status is JobStatus.FAILED and error.get("type") == InvalidInput.type:
            raise InvalidInput(f"{where}: {message}")
        if rec.status is JobStatus.FAILED:
            raise ModelFailed(f"{where}: the model failed: {message}")
        if rec.status is JobStatus.EXPIRED:
            raise TimedOut(f"{where}: expired before a worker started it (deadline_ms)")
        raise JobConflict(f"{where}: job {rec.id} was cancelled", rec.status.value)


async def _wait_all(
    st: GatewayState, ids: list[str], owner: str | None, keep: bool
) -> list[JobRecord]:
    """Every job once ended; TimedOut after ``predict_timeout_s``. Unless ``keep`` (an
    Idempotency-Key, whose retry will wait on these same jobs) the unfinished are
    cancelled: nobody else can ever read them."""
    limit = st.gw.predict_timeout_s
    if len(ids) == 1:  # the usual request: no task per wait
        recs = [await service.wait(st, ids[0], limit, owner)]
    else:
        recs = await asyncio.gather(*(service.wait(st, job_id, limit, owner) for job_id in ids))
    pending = [r.id for r in recs if not r.status.terminal]
    if pending:
        if not keep:
            for job_id in pending:
                with contextlib.suppress(JobConflict, JobNotFound):
                    await service.cancel(st, job_id, owner)
        again = " (retry with the same Idempotency-Key to wait on)" if keep else ""
        raise TimedOut(
            f"{len(pending)} of {len(ids)} inputs not done after {limit:g} s "
            f"(gateway.predict_timeout_s){again}"
        )
    return list(recs)


@router.post(
    "/embeddings",
    response_class=Json,
    responses={
        200: {"model": EmbeddingsResponse},
        **openai_errors(400, 401, 403, 404, 409, 413, 415, 429, 502, 503, 504),
    },
    openapi_extra=IDEMPOTENCY_DOC,
)
async def create_embeddings(body: EmbeddingsRequest, request: Request) -> Json:
    """OpenAI's embeddings API: ``model`` is a Sluice model, each input one job; waits
    up to ``gateway.predict_timeout_s`` for all of them."""
    return await embeddings_answer(request.app.state.gateway, request.scope, body)


async def embeddings_answer(st: GatewayState, scope: Scope, body: EmbeddingsRequest) -> Json:
    """What ``create_embeddings`` answers, from the parsed request: the FastAPI route
    and the lean path (gateway.lean) both call it, so they answer alike."""
    key = caller(scope)
    idempotency_key = header(scope, b"idempotency-key")
    cfg = st.model(body.model)
    if body.dimensions is not None:
        raise InvalidInput(
            f"dimensions: not supported; model {body.model!r} returns embeddings of its own size"
        )
    check_model(body.model, cfg)
    texts = texts_of(body.input, st.gw.max_batch_inputs)
    owner = key.owner if key else None
    digest = service.request_hash(body) if idempotency_key is not None else ""
    spec = service.Spec(
        body.priority, body.deadline_ms, None, idempotency_key, owner, request_hash=digest
    )
    views, _ = await service.submit(st, body.model, texts, spec, batch=True)
    ids = [v["id"] for v in views]
    recs = await _wait_all(st, ids, owner.name if owner else None, idempotency_key is not None)
    check_ended(recs)
    data = [
        {"object": "embedding", "index": i, "embedding": embedding_of(body, rec)}
        for i, rec in enumerate(recs)
    ]
    tokens = recs[0].cost if len(recs) == 1 else sum(rec.cost for rec in recs)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return Json({"object": "list", "data": data, "model": body.model, "usage": usage})
