"""Who may call what: API keys on /v1, admin keys on admin routes, listener split.

Both guards are pure ASGI (no per-request task or body copy) and path based, so
any router or mounted app under an admin prefix (``/dashboard`` and its static
files included) is covered without registering it here. They check every scope
that has a path, HTTP and WebSocket alike (a WebSocket is refused before it is
accepted); only the lifespan passes unchecked. They refuse through
:func:`gateway.errors.send_error`, so a refusal is the response a route raising
the same error would get. With no keys configured :class:`AuthGuard` is not
installed at all: the open gateway's hot path is unchanged.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import send_error
from sluice.apikeys import ApiKey, KeyRing
from sluice.errors import Forbidden, SluiceError, Unauthorized

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
# Prefixes, so that everything mounted below them is admin too.
ADMIN_PREFIXES = ("/metrics", "/dashboard", "/v1/admin")
# The dashboard's page and static assets carry no data (its numbers come from
# /dashboard/api/*, which needs the admin key). A browser cannot send a Bearer
# header when it navigates, so the page must load without one to ask for the key.
PUBLIC_ADMIN_PATHS = frozenset({"/dashboard"})
PUBLIC_ADMIN_PREFIXES = ("/dashboard/static/",)
SCOPE_KEY = "sluice_api_key"  # where AuthGuard leaves the caller's ApiKey in scope["state"]
GUARDED_SCOPES = ("http", "websocket")  # every scope with a path; "lifespan" has none


def is_admin_path(path: str) -> bool:
    return path.startswith(ADMIN_PREFIXES)


def needs_key(path: str) -> bool:
    if path in PUBLIC_ADMIN_PATHS or path.startswith(PUBLIC_ADMIN_PREFIXES):
        return False
    return path.startswith("/v1/") or path == "/v1" or is_admin_path(path)


def presented_key(scope: Scope) -> str | None:
    """``Authorization: Bearer <key>`` or ``X-API-Key: <key>``."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
        elif name == b"x-api-key" and value.strip():
            return str(value.decode("latin-1").strip())
    return None


def header(scope: Scope, name: bytes) -> str | None:
    """The first ``name`` header (lower-case bytes), as ``request.headers.get`` reads it."""
    for k, v in scope["headers"]:
        if k == name:
            return str(v.decode("latin-1"))
    return None


def caller(scope: Scope) -> ApiKey | None:
    """The authenticated key of this request (None on an open gateway)."""
    state = scope.get("state")
    return state.get(SCOPE_KEY) if state else None


def owner_name(scope: Scope) -> str | None:
    key = caller(scope)
    return key.name if key is not None else None


def check(keyring: KeyRing, path: str, presented: str | None) -> ApiKey | SluiceError | None:
    """Pure decision: the caller's key, an error to answer with, or None (open path)."""
    if not needs_key(path):
        return None
    if presented is None:
        return Unauthorized("an API key is required: send 'Authorization: Bearer <key>'")
    key = keyring.verify(presented)
    if key is None:
        return Unauthorized("the API key is not valid")
    if is_admin_path(path) and not key.admin:
        return Forbidden("this route needs an admin API key")
    return key


class AuthGuard:
    """401 without a valid key on /v1 and admin routes, 403 for a non-admin key on
    an admin route (HTTP and WebSocket); otherwise records the caller's key for the routes."""

    def __init__(self, app: ASGIApp, keyring: KeyRing) -> None:
        self.app = app
        self.keyring = keyring

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in GUARDED_SCOPES:
            found = check(self.keyring, scope["path"], presented_key(scope))
            if isinstance(found, SluiceError):
                await send_error(found, scope, receive, send)
                return
            if found is not None:
                scope.setdefault("state", {})[SCOPE_KEY] = found
        await self.app(scope, receive, send)


class Listener:
    """One listener's view of the app: ``admin=True`` serves only admin routes (and
    the health probes), ``admin=False`` everything but them (404 like any unknown path)."""

    def __init__(self, app: ASGIApp, admin: bool) -> None:
        self.app = app
        self.admin = admin

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in GUARDED_SCOPES:
            path = scope["path"]
            if path not in OPEN_PATHS and is_admin_path(path) != self.admin:
                await send_error(HTTPException(404), scope, receive, send)
                return
        await self.app(scope, receive, send)
