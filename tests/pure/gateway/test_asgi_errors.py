"""ASGI code answers an error exactly as a route raising it does.

The body guard and the access guards answer before any route runs, through
``gateway.errors.send_error``; each case here compares their answer, byte for
byte with its headers, against a route (or the stream check inside one) that
raises the same error and is answered by the exception handlers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import fakeredis
import httpx
from fakeredis import aioredis as fake_aioredis
from fastapi import FastAPI
from starlette.types import ASGIApp

from gateway.app import create_app
from gateway.auth import Listener, check
from sluice.apikeys import KeyRing, load_keyring
from sluice.errors import SluiceError, UnsupportedMediaType
from tests.kit.security import ALICE, bearer, keyed_config

LIMIT = 4096
SUBMIT = "/v1/models/m/jobs"
# Outside /v1 and the admin prefixes, so no guard stops the request before it.
RAISE = "/raise"
Shape = tuple[int, dict[str, str], bytes]


def _app(keyring: KeyRing, raised: list[SluiceError]) -> FastAPI:
    redis = fake_aioredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True)
    app = create_app(keyed_config(gateway={"max_body_bytes": LIMIT}), redis=redis, keyring=keyring)

    async def raise_it() -> None:
        raise raised[0]

    app.add_api_route(RAISE, raise_it)
    return app


def _keyring() -> KeyRing:
    return load_keyring(keyed_config().auth)


async def _shape(app: ASGIApp, method: str, path: str, **kw: object) -> Shape:
    """Status, headers and body bytes (no lifespan: nothing here reads Redis)."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        resp = await client.request(method, path, **kw)  # type: ignore[arg-type]
    return resp.status_code, dict(resp.headers), resp.content


async def _route_answer(keyring: KeyRing, err: SluiceError) -> Shape:
    return await _shape(_app(keyring, [err]), "GET", RAISE)


async def test_the_auth_guard_refuses_with_the_bytes_of_a_route_raising_the_same_error() -> None:
    keyring = _keyring()
    app = _app(keyring, [])
    cases = [  # (path, key presented): 401 without a key, 401 bad key, 403 not admin
        ("/v1/models", None),
        ("/v1/models", "sk_not-a-configured-key"),
        ("/v1/admin/anything", ALICE),
    ]
    for path, key in cases:
        err = check(keyring, path, key)
        assert isinstance(err, SluiceError), (path, key)
        headers = bearer(key) if key else {}
        guard = await _shape(app, "GET", path, headers=headers)
        assert guard[0] in (401, 403), guard
        assert guard == await _route_answer(keyring, err), (path, key)


async def test_the_admin_listener_404_is_the_routers_404() -> None:
    app = _app(_keyring(), [])
    # The API listener hides admin routes "like any unknown path": the same 404.
    hidden = await _shape(Listener(app, admin=False), "GET", "/metrics", headers=bearer(ALICE))
    unknown = await _shape(app, "GET", "/no/such/route")
    assert hidden[0] == 404 and hidden == unknown
    assert b'"type":"not_found"' in hidden[2]


async def test_a_declared_length_over_the_limit_is_answered_like_a_stream_that_passes_it() -> None:
    app = _app(_keyring(), [])
    headers = {**bearer(ALICE), "content-type": "application/json"}
    declared = await _shape(app, "POST", SUBMIT, content=b" " * (LIMIT + 1), headers=headers)

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(LIMIT // 1024 + 2):
            yield b" " * 1024

    # No Content-Length: the route reads the stream and the guard's check raises.
    streamed = await _shape(app, "POST", SUBMIT, content=chunks(), headers=headers)
    assert declared[0] == 413 and declared == streamed
    assert declared[1]["connection"] == "close"
    assert b'"type":"input_too_large"' in declared[2]


async def test_the_body_guards_415_is_a_routes_415_that_closes_the_connection() -> None:
    keyring = _keyring()
    app = _app(keyring, [])
    headers = {**bearer(ALICE), "content-type": "text/plain"}
    status, guard_headers, body = await _shape(app, "POST", SUBMIT, content=b"x", headers=headers)
    message = httpx.Response(status, content=body).json()["error"]["message"]
    route = await _route_answer(keyring, UnsupportedMediaType(message))
    # The body was never read, so the guard also closes the connection.
    assert guard_headers.pop("connection") == "close"
    assert status == 415 and (status, guard_headers, body) == route
