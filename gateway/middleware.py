"""Pure ASGI middleware (no per-request task or body copy): body limits, media type, metrics.

Refusals (413, 415) go through :func:`gateway.errors.send_error`: the bytes a route
raising the same error answers, with ``Connection: close`` since the body is unread.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import send_error
from gateway.metrics import GatewayMetrics
from sluice.bulk.lines import MEDIA_TYPES as JSONL_MEDIA_TYPES
from sluice.errors import UnsupportedMediaType

BODY_METHODS = ("POST", "PUT", "PATCH")
KNOWN_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}


# The client may still be sending a body nobody will read: close after answering.
CLOSE = {"Connection": "close"}


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is over the limit of {limit} bytes", CLOSE)


def body_headers(headers: Any) -> tuple[bytes | None, bool, bytes | None]:
    """Content-Length, whether Transfer-Encoding is there, Content-Type (the first of
    each, as a lookup by name finds it), in one pass over the headers. Transfer-Encoding
    wins over Content-Length (RFC 9112 6.3): with both, the declared length says
    nothing about what arrives, so the body is counted."""
    length = ctype = None
    chunked = False
    for k, v in headers:
        if k == b"content-length":
            if length is None:
                length = bytes(v)
        elif k == b"content-type":
            if ctype is None:
                ctype = bytes(v)
        elif k == b"transfer-encoding":
            chunked = True
    return length, chunked, ctype


def _is_json(content_type: bytes | None) -> bool:
    if content_type is None:
        return False
    mime = content_type.split(b";", 1)[0].strip().lower()
    return mime == b"application/json" or mime.endswith(b"+json")


def _is_jsonl(content_type: bytes | None) -> bool:
    if content_type is None:
        return False
    mime = content_type.split(b";", 1)[0].strip().lower().decode("latin-1")
    return mime in JSONL_MEDIA_TYPES


def _is_bulk_upload(path: str) -> bool:
    parts = path.split("/")  # "", "v1", "models", "<model>", "bulk"
    return len(parts) == 5 and parts[1:3] == ["v1", "models"] and parts[4] == "bulk"


class BodyGuard:
    """413 before reading a body over ``max_bytes``; 415 for a body that is not JSON.

    A declared Content-Length over the limit is refused without reading a byte;
    a chunked body is counted as it arrives and refused as soon as it passes.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, bulk_max_bytes: int | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        # A bulk upload (POST /v1/models/{model}/bulk) is a JSONL file with a limit of
        # its own; each of its lines is still held to max_bytes when it is fed.
        self.bulk_max_bytes = bulk_max_bytes or max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            return await self.app(scope, receive, send)
        path = scope["path"]
        bulk = path.endswith("/bulk") and _is_bulk_upload(path)
        limit = self.bulk_max_bytes if bulk else self.max_bytes
        length, chunked, ctype = body_headers(scope["headers"])
        declared = int(length) if length and length.isdigit() else None
        if declared is not None and declared > limit:
            # The same answer as a chunked body that passes the limit (BodyTooLarge).
            return await send_error(BodyTooLarge(limit), scope, receive, send)
        if (declared or chunked) and not (_is_jsonl(ctype) if bulk else _is_json(ctype)):
            want = "a JSONL file (application/x-ndjson)" if bulk else "application/json"
            err = UnsupportedMediaType(f"the request body must be {want}")
            return await send_error(err, scope, receive, send, CLOSE)
        if not chunked:  # the HTTP server delivers no more than a declared length
            return await self.app(scope, receive, send)
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return msg

        await self.app(scope, limited, send)


class Metrics:
    """Request count and latency by route template (bounded labels, never a raw path)."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics
        # Label children, looked up once per (route, method, status): labels() is
        # a lock and a dict build per call on the hot path otherwise.
        self._counters: dict[tuple[str, str, int], Any] = {}
        self._histograms: dict[tuple[str, str], Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 500

        async def send_status(msg: Message) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = msg["status"]
            await send(msg)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.record(scope, status, start)

    def record(self, scope: Scope, status: int, start: float) -> None:
        """Count one answered request and observe its latency since ``start``."""
        route: Any = scope.get("route")
        name = getattr(route, "path", None) or "unmatched"
        method = scope["method"] if scope["method"] in KNOWN_METHODS else "other"
        self._count(name, method, status)
        key = (name, method)
        hist = self._histograms.get(key)
        if hist is None:
            hist = self._histograms[key] = self.metrics.latency.labels(name, method)
        hist.observe(time.perf_counter() - start)

    def _count(self, route: str, method: str, status: int) -> None:
        key = (route, method, status)
        child = self._counters.get(key)
        if child is None:
            child = self._counters[key] = self.metrics.requests.labels(route, method, str(status))
        child.inc()
