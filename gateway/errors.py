"""The one mapping from Sluice's errors to HTTP, and the error body every answer uses.

Every error response is ``{"error": {"type", "message"}}``. Client mistakes are
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
    ConfigError,
    Forbidden,
    InputTooLarge,
    InvalidInput,
    JobConflict,
    JobNotFound,
    NotReady,
    Overloaded,
    PriorityNotAllowed,
    QueueFull,
    RateLimited,
    RedisUnavailable,
    SluiceError,
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
    InvalidInput: 422,
    UnknownModel: 404,
    JobNotFound: 404,
    JobConflict: 409,
    InputTooLarge: 413,
    UnsupportedMediaType: 415,
    QueueFull: 429,
    Overloaded: 429,
    RedisUnavailable: 503,
    NotReady: 503,
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


def error_response(
    status: int,
    type_: str,
    message: str,
    retry_after_s: float | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """The error body with its status; ``headers`` are set after the table's own."""
    fixed = {}
    if retry_after_s is not None:
        fixed["Retry-After"] = str(max(1, math.ceil(retry_after_s)))
    if status == 401:  # RFC 9110: a 401 names the scheme it wants
        fixed["WWW-Authenticate"] = 'Bearer realm="sluice"'
    body = {"error": {"type": type_, "message": message}}
    resp = JSONResponse(body, status_code=status, headers=fixed)
    for k, v in (headers or {}).items():
        resp.headers[k] = v
    return resp


def response_for(
    e: SluiceError | StarletteHTTPException, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The table's answer to ``e``: what a route that raises it answers, plus ``headers``."""
    if isinstance(e, SluiceError):
        return error_response(status_for(e), e.type, str(e), e.retry_after_s, headers)
    type_ = HTTP_TYPES.get(e.status_code, "http_error")
    extra = {**(e.headers or {}), **(headers or {})}
    return error_response(e.status_code, type_, str(e.detail), None, extra)


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
    await response_for(e, headers)(scope, receive, send)


def _field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


async def _sluice_error(_: Request, e: Exception) -> JSONResponse:
    assert isinstance(e, SluiceError)
    return response_for(e)


async def _validation_error(_: Request, e: Exception) -> JSONResponse:
    assert isinstance(e, RequestValidationError)
    errs = e.errors()
    first = errs[0] if errs else {"loc": (), "msg": "invalid request"}
    if first.get("type") == "json_invalid":
        # gateway.strict_json refuses through this path too, with its reason in ctx.
        return error_response(422, INVALID_JSON, _json_message(first))
    message = f"{_field(tuple(first.get('loc', ())))}: {first.get('msg')}"
    if len(errs) > 1:
        message += f" (and {len(errs) - 1} more)"
    return error_response(422, "invalid_request", message)


def _json_message(err: Any) -> str:
    reason = str((err.get("ctx") or {}).get("error") or "").strip()
    loc = tuple(err.get("loc", ()))
    pos = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else 0
    where = f" at character {pos}" if pos > 0 else ""
    return f"body is not valid JSON: {reason}{where}" if reason else "body is not valid JSON"


async def _http_error(_: Request, e: Exception) -> JSONResponse:
    assert isinstance(e, StarletteHTTPException)
    return response_for(e)


async def _redis_error(_: Request, e: Exception) -> JSONResponse:
    # A Redis that answers with an error (OOM, READONLY, LOADING) is unavailable to
    # us, not a bug in the request.
    log.warning("redis error: %s", e)
    return error_response(503, RedisUnavailable.type, f"Redis error: {e}", 1)


async def _internal(_: Request, e: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=e)
    return error_response(500, "internal", "internal error")


def install(app: FastAPI) -> None:
    app.add_exception_handler(SluiceError, _sluice_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RedisError, _redis_error)
    app.add_exception_handler(Exception, _internal)
