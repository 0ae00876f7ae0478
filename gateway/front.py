"""The hot routes' plain requests answered before FastAPI's middleware stack (ADR 0174).

The lean path (gateway.lean, ADR 0162) answers predict, job submits,
``/v1/embeddings`` and job reads (ADR 0178) without FastAPI's router, but from
under eight ASGI layers, each a coroutine per request and some a send wrapper
per message: FastAPI's and Starlette's app calls, ServerErrorMiddleware,
FastAPI's telemetry and body-limit wrappers, then the gateway's Metrics,
AuthGuard and BodyGuard. :class:`GatewayApp`
(the gateway's FastAPI) gives a request that the lean path takes, and that every
one of those layers would pass on untouched, to :class:`HotFront`, which does for
it in one call what they would do: counts and times it as ``Metrics``, records the
caller's key as ``AuthGuard``, answers through the lean path (its handlers answer
its errors), and an error no handler takes as ``ServerErrorMiddleware`` does (the
app's 500 answer, then the exception raised on to the server).

Everything else goes down the whole stack, unchanged: a request a guard refuses or
must watch as it arrives (no Content-Length, one over the limit, a chunked body, a
missing or bad key), a body that fails to parse or validate (its messages replayed:
the stack's lean path and then FastAPI answer it), a mounted root path. FastAPI's
native telemetry is off in the gateway's app (gateway.app), so skipping its
wrapper loses nothing.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI
from starlette._utils import is_async_callable
from starlette.concurrency import run_in_threadpool
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from gateway.auth import SCOPE_KEY, check, presented_key
from gateway.lean import Lean, LeanRoutes, read_body, replay
from gateway.middleware import Metrics, body_headers
from sluice.apikeys import KeyRing
from sluice.errors import SluiceError

Taken = tuple[Lean, str, float | None]


class HotFront:
    """What the stack's layers do for a plain hot request, done in one call."""

    def __init__(
        self, api: FastAPI, metrics: Metrics, max_bytes: int, keyring: KeyRing | None
    ) -> None:
        self.lean = LeanRoutes(api, api)  # its own app is never called from here
        self.metrics = metrics
        self.max_bytes = max_bytes
        self.keyring = keyring or None  # an empty ring: no AuthGuard installed

    def take(self, scope: Scope) -> Taken | None:
        """The lean route of a request every guard would pass untouched, or None."""
        taken = self.lean.take(scope)
        if taken is None:
            return None
        if taken[0].body is not None:  # a GET the lean path takes has no body
            length, chunked, _ = body_headers(scope["headers"])
            if chunked or not length or not length.isdigit() or int(length) > self.max_bytes:
                return None  # BodyGuard's to judge or to count as it arrives
        if self.keyring is not None:
            found = check(self.keyring, scope["path"], presented_key(scope))
            if isinstance(found, SluiceError):
                return None  # AuthGuard refuses it
            if found is not None:
                scope.setdefault("state", {})[SCOPE_KEY] = found
        return taken

    async def answer(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        taken: Taken,
        errors: ServerErrorMiddleware,
    ) -> Receive | None:
        """Answer the request; or, when its body is not the lean path's, give back the
        ``receive`` that replays what was read, for the stack to answer."""
        lean, name, timeout = taken
        start = time.perf_counter()
        scope["route"] = lean.route  # as FastAPI's router would: the metrics' label
        status, started = 500, False
        try:
            seen: list[Message] = []
            try:
                body = None
                if lean.body is not None:
                    raw = await read_body(receive, seen)
                    body = self.lean._parse(lean, raw) if raw else None
                    if body is None:
                        del scope["route"]
                        return replay(seen, receive)
                response = await lean.serve(self.lean.state, scope, name, body, timeout)
            except Exception as exc:  # noqa: BLE001 - the app's handlers decide, as for a route
                response = await self.lean.error_response(exc, scope, receive)
            status, started = response.status_code, True
            await response(scope, receive, send)
        except Exception as exc:
            if not started:  # as ServerErrorMiddleware: the 500 answer, then raised on
                await (await server_error(errors, scope, exc))(scope, receive, send)
            raise
        finally:
            if "route" in scope:
                self.metrics.record(scope, status, start)
        return None


async def server_error(errors: ServerErrorMiddleware, scope: Scope, exc: Exception) -> Response:
    """The response ``errors`` (the app's outermost middleware) gives for ``exc``."""
    request = Request(scope)
    handler: Any = errors.handler  # an HTTP handler here (typed for WebSockets too)
    if errors.debug:
        response: Any = await run_in_threadpool(errors.debug_response, request, exc)
    elif handler is None:
        response = errors.error_response(request, exc)
    elif is_async_callable(handler):
        response = await handler(request, exc)
    else:
        response = await run_in_threadpool(handler, request, exc)
    return response  # type: ignore[no-any-return]


class GatewayApp(FastAPI):
    """FastAPI, with :class:`HotFront` (when set) ahead of its middleware stack."""

    front: HotFront | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        front = self.front
        taken = front.take(scope) if front is not None and not self.root_path else None
        if front is not None and taken is not None:
            scope["app"] = self  # as Starlette's app call
            stack = self.middleware_stack
            if stack is None:
                stack = self.middleware_stack = self.build_middleware_stack()
            if isinstance(stack, ServerErrorMiddleware):
                rest = await front.answer(scope, receive, send, taken, stack)
                if rest is None:
                    return
                receive = rest
        await super().__call__(scope, receive, send)
