"""The one mapping from Sluice's errors to HTTP, and the error body every answer uses.

Every error response is ``{"error": {"type", "message"}}``, except under the
OpenAI-compatible paths (``/v1/embeddings``, ``/v1/completions``,
``/v1/chat/completions``), which answer in OpenAI's shape
(:func:`openai_error`) so OpenAI clients raise their own errors. Client mistakes are
4xx, an unreachable or slow Redis is 503, and only a bug is 500. Routes raise
and the exception handlers answer; ASGI code that answers before routing (the
body guard, the access guards) calls :func:`send_error`, so both send the same
status, headers and bytes for the same error.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from sluice.errors import (
    BulkUnavailable,
    ConfigError,
    Forbidden,
    IdempotencyKeyReused,
    InputTooLarge,
    InvalidInput,
    JobConflict,
    JobNotFound,
    ModelFailed,
    ModelPaused,
    NotReady,
    Overloaded,
    PriorityNotAllowed,
    QueueFull,
    RateLimited,
    RedisUnavailable,
    SluiceError,
    TimedOut,
    TooManyStreams,
    Unauthorized,
    UnknownModel,
    UnsupportedMediaType,
)

log = logging.getLogger("sluice.gateway")

HTTP_STATUS: dict[type[SluiceError], int] = {
    Unauthorized: 401,
    Forbidden: 403,
    PriorityNotAllowed: 403,
    RateLimited: 429,
    TooManyStreams: 429,
    InvalidInput: 422,
    IdempotencyKeyReused: 422,
    UnknownModel: 404,
    JobNotFound: 404,
    JobConflict: 409,
    InputTooLarge: 413,
    UnsupportedMediaType: 415,
    QueueFull: 429,
    Overloaded: 429,
    RedisUnavailable: 503,
    BulkUnavailable: 503,
    ModelPaused: 503,
    NotReady: 503,
    ModelFailed: 502,
    TimedOut: 504,
    ConfigError: 500,
}
HTTP_TYPES = {404: "not_found", 405: "method_not_allowed", 413: "input_too_large"}
INVALID_JSON = "invalid_json"  # the body is not (strict) JSON; see gateway.strict_json


def status_for(e: SluiceError) -> int:
    for cls in type(e).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500


WS_POLICY_VIOLATION = 1008  # the close code of a WebSocket refused before it is accepted


OPENAI_PATHS = frozenset({"/v1/embeddings", "/v1/completions", "/v1/chat/completions"})
# OpenAI's codes for the errors whose name it fixes; otherwise Sluice's type is the code.
OPENAI_CODES = {"unknown_model": "model_not_found", "unauthorized": "invalid_api_key"}


def openai_error(status: int, type_: str, message: str, param: str | None = None) -> Any:
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``; the
    code is Sluice's error type (OpenAI's own name where it has one)."""
    if status == 429:
        kind = "rate_limit_error"
    elif status >= 500:
        kind = "server_error"
    else:
        kind = "invalid_request_error"
    code = OPENAI_CODES.get(type_, type_)
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(
    status: int,
    type_: str,
    message: str,
    retry_after_s: float | None = None,
    headers: Mapping[str, str] | None = None,
    *,
    path: str = "",
    param: str | None = None,
) -> JSONResponse:
    """The error body with its status; ``headers`` are set after the table's own.
    Under an OpenAI path the body is OpenAI's and a 422 is OpenAI's 400."""
    fixed = {}
    if retry_after_s is not None:
        fixed["Retry-After"] = str(max(1, math.ceil(retry_after_s)))
    if status == 401:  # RFC 9110: a 401 names the scheme it wants
        fixed["WWW-Authenticate"] = 'Bearer realm="sluice"'
    body: Any = {"error": {"type": type_, "message": message}}
    if path in OPENAI_PATHS:
        status = 400 if status == 422 else status
        body = openai_error(status, type_, message, param)
    resp = JSONResponse(body, status_code=status, headers=fixed)
    for k, v in (headers or {}).items():
        resp.headers[k] = v
    return resp


def response_for(
    e: SluiceError | StarletteHTTPException,
    headers: Mapping[str, str] | None = None,
    path: str = "",
) -> JSONResponse:
    """The table's answer to ``e``: what a route that raises it answers, plus ``headers``."""
    if isinstance(e, SluiceError):
        param = getattr(e, "param", None)  # the request field at fault, when one is
        return error_response(
            status_for(e), e.type, str(e), e.retry_after_s, headers, path=path, param=param
        )
    type_ = HTTP_TYPES.get(e.status_code, "http_error")
    extra = {**(e.headers or {}), **(headers or {})}
    return error_response(e.status_code, type_, str(e.detail), None, extra, path=path)


async def send_error(
    e: SluiceError | StarletteHTTPException,
    scope: Scope,
    receive: Receive,
    send: Send,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Answer ``e`` from ASGI code instead of the app: over HTTP :func:`response_for`'s
    response; a WebSocket is closed before it is accepted with 1008 (policy
    violation), which the server answers ``403`` (ASGI spec).

    Not the ``websocket.http.response`` denial extension, though it could carry the
    JSON error: uvicorn logs an ERROR line for each upgrade denied that way, which
    anyone could then fill the log with, with no key."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": WS_POLICY_VIOLATION})
        return
    await response_for(e, headers, scope.get("path", ""))(scope, receive, send)


def _field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


async def _sluice_error(request: Request, e: Exception) -> JSONResponse:
    assert isinstance(e, SluiceError)
    return response_for(e, path=request.url.path)


async def _validation_error(request: Request, e: Exception) -> JSONResponse:
    assert isinstance(e, RequestValidationError)
    path = request.url.path
    errs = e.errors()
    first = errs[0] if errs else {"loc": (), "msg": "invalid request"}
    if first.get("type") == "json_invalid":
        # gateway.strict_json refuses through this path too, with its reason in ctx.
        return error_response(422, INVALID_JSON, _json_message(first), path=path)
    field = _field(tuple(first.get("loc", ())))
    message = f"{field}: {first.get('msg')}"
    if len(errs) > 1:
        message += f" (and {len(errs) - 1} more)"
    return error_response(422, "invalid_request", message, path=path, param=field)


def _json_message(err: Any) -> str:
    reason = str((err.get("ctx") or {}).get("error") or "").strip()
    loc = tuple(err.get("loc", ()))
    pos = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else 0
    where = f" at character {pos}" if pos > 0 else ""
    return f"body is not valid JSON: {reason}{where}" if reason else "body is not valid JSON"


async def _http_error(request: Request, e: Exception) -> JSONResponse:
    assert isinstance(e, StarletteHTTPException)
    return response_for(e, path=request.url.path)


async def _redis_error(request: Request, e: Exception) -> JSONResponse:
    # A Redis that answers with an error (OOM, READONLY, LOADING) is unavailable to
    # us, not a bug in the request.
    log.warning("redis error: %s", e)
    path = request.url.path
    return error_response(503, RedisUnavailable.type, f"Redis error: {e}", 1, path=path)


async def _internal(request: Request, e: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=e)
    return error_response(500, "internal", "internal error", path=request.url.path)


def install(app: FastAPI) -> None:
    app.add_exception_handler(SluiceError, _sluice_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RedisError, _redis_error)
    app.add_exception_handler(Exception, _internal)
