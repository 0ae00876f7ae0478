"""The hot routes answered without FastAPI's per-request machinery (ADR 0162).

``POST /v1/models/{model}/predict``, ``POST /v1/models/{model}/jobs`` and
``POST /v1/embeddings`` carry most of a gateway's requests. :class:`LeanRoutes`
sits just outside FastAPI's exception middleware and router (inside the metrics,
access and body guards, which see every request as before) and answers a
request to one of them itself when it is a plain valid one: a JSON body
(``Content-Type: application/json``) that :func:`gateway.strict_json.loads`
parses and the route's pydantic model accepts, a model name and ``?timeout=``
within their declared bounds. It then calls the function the FastAPI route calls
(``predict_answer``, ``submit_answer``, ``embeddings_answer``), and an error
raised there goes to the app's own exception handler, as from the router.

``GET /v1/jobs/{job_id}`` (ADR 0178), the poll and long-poll that follow a
submit, is answered here too when plain: a job id the route's path takes (no
``/``, at most ``MAX_JOB_ID`` characters), no ``?wait=`` or one plain decimal in
[0, ``MAX_WAIT_S``], no body; it calls ``job_answer`` as ``get_job`` does.

Any other request on those paths (a body that fails to parse or validate, an
unusual query, no body, another media type, a mounted root path, a client gone
mid-body) falls through to FastAPI with the messages already read replayed, so
every refusal is FastAPI's own answer. The routes stay declared in FastAPI: the
OpenAPI schema and the fall-through path are unchanged. Most plain requests
are answered earlier still, ahead of the whole middleware stack, by
:class:`gateway.front.HotFront` (ADR 0174) with this class's checks and parts.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import orjson
from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.exceptions import HTTPException, WebSocketException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.routers.embeddings import embeddings_answer
from gateway.routers.jobs import MAX_JOB_ID, MAX_WAIT_S, job_answer, submit_answer
from gateway.routers.models import PREDICT_MAX_TIMEOUT_S, predict_answer
from gateway.schemas import EmbeddingsRequest, JobRequest
from gateway.state import GatewayState
from gateway.strict_json import MAX_DEPTH, loads, may_overflow

MODELS = "/v1/models/"
EMBEDDINGS = "/v1/embeddings"
JOBS = "/v1/jobs/"
MAX_MODEL_NAME = 64  # ModelName's max_length in the routers
# ?timeout= as a plain decimal; anything else (exponents, signs, "inf") is FastAPI's to judge.
_PLAIN_NUMBER = re.compile(r"(0|[1-9][0-9]{0,2})(\.[0-9]{1,6})?")

Serve = Callable[[GatewayState, Scope, str, Any, float | None], Awaitable[Response]]
Handler = Callable[[Request, Exception], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Lean:
    """One route answered here: its FastAPI route (for ``scope["route"]``, which
    the metrics label with), its body model (None: a GET, no body read) and what
    answers it."""

    route: APIRoute
    body: type[BaseModel] | None
    serve: Serve
    timeout: bool = False  # reads ?timeout= (predict); the others ignore the query, as FastAPI


def _predict(st: GatewayState, scope: Scope, model: str, body: Any, t: float | None) -> Any:
    return predict_answer(st, scope, model, body, t)


def _submit(st: GatewayState, scope: Scope, model: str, body: Any, _: float | None) -> Any:
    return submit_answer(st, scope, model, body)


def _embeddings(st: GatewayState, scope: Scope, _: str, body: Any, __: float | None) -> Any:
    return embeddings_answer(st, scope, body)


def _job(st: GatewayState, scope: Scope, job_id: str, _: Any, wait: float | None) -> Any:
    return job_answer(st, scope, job_id, wait or 0.0)


def _find_route(routes: list[BaseRoute], path: str, method: str) -> APIRoute | None:
    """The ``method`` route at ``path``, looked for inside included routers too (FastAPI
    keeps them whole, and its router puts the router's own route in the scope)."""
    for r in routes:
        if isinstance(r, APIRoute) and r.path == path and method in (r.methods or ()):
            return r
        inner = getattr(r, "original_router", None)
        found = _find_route(inner.routes, path, method) if inner is not None else None
        if found is not None:
            return found
    return None


def _route(api: FastAPI, path: str, method: str = "POST") -> APIRoute:
    found = _find_route(api.routes, path, method)
    if found is None:
        raise LookupError(f"no {method} route {path} to answer lean")
    return found


def _query_number(query: bytes, name: str) -> tuple[bool, float | None]:
    """(handled here, the value): ``?name=`` absent, or once as a plain decimal;
    (False, None) for anything FastAPI should judge."""
    if not query:
        return True, None
    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
    values = [v for k, v in pairs if k == name]
    if not values:
        return True, None
    if len(values) > 1 or not _PLAIN_NUMBER.fullmatch(values[0]):
        return False, None
    return True, float(values[0])


def query_timeout(query: bytes) -> tuple[bool, float | None]:
    """(handled here, the value): ``?timeout=`` absent, or once as a plain decimal
    in (0, 60]; (False, ...) for anything FastAPI should judge."""
    ok, value = _query_number(query, "timeout")
    if value is None:
        return ok, None
    return 0 < value <= PREDICT_MAX_TIMEOUT_S, value


def query_wait(query: bytes) -> tuple[bool, float]:
    """(handled here, the value): ``?wait=`` absent (0), or once as a plain decimal
    in [0, MAX_WAIT_S]; (False, ...) for anything FastAPI should judge."""
    ok, value = _query_number(query, "wait")
    if value is None:
        return ok, 0.0
    return value <= MAX_WAIT_S, value


def _has_body(headers: Any) -> bool:
    """A declared body: a Content-Length other than 0, or Transfer-Encoding."""
    for k, v in headers:
        if (k == b"content-length" and v != b"0") or k == b"transfer-encoding":
            return True
    return False


def _is_json(scope: Scope) -> bool:
    for k, v in scope["headers"]:
        if k == b"content-type":
            return bool(v.split(b";", 1)[0].strip().lower() == b"application/json")
    return False


async def read_body(receive: Receive, seen: list[Message]) -> bytes | None:
    """The whole body, each message kept in ``seen``; None if the client left."""
    chunks = []
    while True:
        msg = await receive()
        seen.append(msg)
        if msg["type"] != "http.request":
            return None
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def replay(seen: list[Message], receive: Receive) -> Receive:
    """``receive`` with the messages already read given again first."""
    pending = list(seen)

    async def again() -> Message:
        return pending.pop(0) if pending else await receive()

    return again


PLAIN_MAX_BYTES = 4096  # a larger body walks more in _colons than strict parsing costs


def _colons(value: Any) -> int:
    """Object members plus the colons inside strings: every ``:`` of the text a
    value came from, when it had no escapes and no duplicate keys."""
    kind = type(value)
    if kind is str:
        return value.count(":")
    if kind is dict:
        return sum(1 + k.count(":") + _colons(v) for k, v in value.items())
    if kind is list:
        return sum(_colons(v) for v in value)
    return 0


def plain_loads(raw: bytes) -> Any:
    """What :func:`gateway.strict_json.loads` makes of ``raw``, by orjson when the
    body is plain (small, no backslash, no number that may overflow, few brackets):
    orjson then parses it to the same values (strict RFC 8259, correctly rounded
    floats, no NaN), and a duplicate key, which orjson would keep the last of, shows
    as a colon of the text missing from the value. Anything else: strict parsing."""
    if (
        len(raw) <= PLAIN_MAX_BYTES
        and b"\\" not in raw
        and raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH
        and not may_overflow(raw)
    ):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return loads(raw)  # a BOM, bad UTF-8, not JSON: strict parsing decides
        if _colons(value) == raw.count(b":"):
            return value
    return loads(raw)


class LeanRoutes:
    """ASGI middleware: the hot routes' plain valid requests, answered directly."""

    def __init__(self, app: ASGIApp, api: FastAPI) -> None:
        self.app = app
        self.state: GatewayState = api.state.gateway
        self.embeddings = Lean(_route(api, EMBEDDINGS), EmbeddingsRequest, _embeddings)
        self.by_tail = {
            "predict": Lean(
                _route(api, MODELS + "{model}/predict"), JobRequest, _predict, timeout=True
            ),
            "jobs": Lean(_route(api, MODELS + "{model}/jobs"), JobRequest, _submit),
        }
        self.job = Lean(_route(api, JOBS + "{job_id}", "GET"), None, _job)
        # The handlers FastAPI's ExceptionMiddleware uses (500/Exception stay with
        # ServerErrorMiddleware, outside: an error no handler takes goes on up to it).
        handlers: dict[Any, Handler] = dict(api.exception_handlers)
        self.status_handlers = {k: v for k, v in handlers.items() if isinstance(k, int)}
        self.handlers = {
            k: v
            for k, v in handlers.items()
            if not isinstance(k, int) and k is not Exception and k is not WebSocketException
        }
        self.status_handlers.pop(500, None)

    def match(self, path: str) -> tuple[Lean, str] | None:
        if path == EMBEDDINGS:
            return self.embeddings, ""
        if path.startswith(MODELS):
            name, _, tail = path[len(MODELS) :].partition("/")
            lean = self.by_tail.get(tail)
            if lean is not None and 0 < len(name) <= MAX_MODEL_NAME:
                return lean, name
        return None

    def take(self, scope: Scope) -> tuple[Lean, str, float | None] | None:
        """The route, model name and ``?timeout=`` of a request this path may answer
        (a JSON POST to a hot route, its query plain), before its body is read; or
        the job read, its id and ``?wait=`` (a plain GET /v1/jobs/{job_id})."""
        if scope["type"] != "http" or scope.get("root_path"):
            return None
        if scope["method"] == "GET":
            return self._take_read(scope)
        if scope["method"] != "POST":
            return None
        found = self.match(scope["path"])
        if found is None:
            return None
        lean, name = found
        ok, timeout = query_timeout(scope["query_string"]) if lean.timeout else (True, None)
        if not ok or not _is_json(scope):
            return None
        return lean, name, timeout

    def _take_read(self, scope: Scope) -> tuple[Lean, str, float | None] | None:
        path = scope["path"]
        if not path.startswith(JOBS):
            return None
        job_id = path[len(JOBS) :]
        if not 0 < len(job_id) <= MAX_JOB_ID or "/" in job_id:
            return None  # not the route's (another route, or its 422 or 404)
        ok, wait = query_wait(scope["query_string"])
        if not ok or _has_body(scope["headers"]):
            return None
        return self.job, job_id, wait

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        taken = self.take(scope)
        if taken is None:
            return await self.app(scope, receive, send)
        lean, name, timeout = taken
        scope["route"] = lean.route  # as FastAPI's router would: the metrics' label
        body = None
        if lean.body is not None:
            seen: list[Message] = []
            try:
                raw = await read_body(receive, seen)
            except Exception as exc:  # noqa: BLE001 - a refusal of the body guard: its handler answers
                return await self._answer_error(exc, scope, receive, send)
            body = self._parse(lean, raw) if raw else None
            if body is None:
                return await self.app(scope, replay(seen, receive), send)
        try:
            response = await lean.serve(self.state, scope, name, body, timeout)
        except Exception as exc:  # noqa: BLE001 - the app's handlers decide, as for a route
            return await self._answer_error(exc, scope, receive, send)
        await response(scope, receive, send)

    @staticmethod
    def _parse(lean: Lean, raw: bytes) -> BaseModel | None:
        if lean.body is None:
            return None
        try:
            return lean.body.model_validate(plain_loads(raw))
        except Exception:  # noqa: BLE001 - FastAPI answers whatever is wrong with it
            return None

    async def _answer_error(
        self, exc: Exception, scope: Scope, receive: Receive, send: Send
    ) -> None:
        response = await self.error_response(exc, scope, receive)
        await response(scope, receive, send)

    async def error_response(self, exc: Exception, scope: Scope, receive: Receive) -> Response:
        """What Starlette's exception middleware answers for ``exc``: the app's handler
        for it; with none, ``exc`` goes on up (to ServerErrorMiddleware's 500)."""
        handler = None
        if isinstance(exc, HTTPException):
            handler = self.status_handlers.get(exc.status_code)
        if handler is None:
            for cls in type(exc).__mro__:
                if cls in self.handlers:
                    handler = self.handlers[cls]
                    break
        if handler is None:
            raise exc
        return await handler(Request(scope, receive), exc)
