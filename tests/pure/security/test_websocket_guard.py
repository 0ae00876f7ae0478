"""The access guards check WebSocket upgrades like HTTP requests (no WebSocket route
exists today: these tests add one to the app, so a future one is covered).

A refused WebSocket is closed before it is accepted, with code 1008 (policy
violation): the server answers the upgrade ``403`` and the app never sees it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
from fakeredis import aioredis as fake_aioredis
from fastapi import FastAPI, WebSocket
from starlette.testclient import TestClient
from starlette.types import Message, Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect

from gateway.app import create_app
from gateway.auth import AuthGuard, Listener
from sluice.apikeys import load_keyring
from tests.kit.security import ALICE, ROOT, bearer, keyed_config

API_WS, ADMIN_WS = "/v1/test-ws", "/v1/admin/test-ws"


def _app() -> FastAPI:
    redis = fake_aioredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True)
    app = create_app(keyed_config(), redis=redis)

    async def hello(ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text("hello")
        await ws.close()

    app.add_api_websocket_route(API_WS, hello)
    app.add_api_websocket_route(ADMIN_WS, hello)
    return app


@pytest.fixture
def app() -> Iterator[FastAPI]:
    yield _app()  # no lifespan: the guards answer before anything reads Redis


def _opened(client: TestClient, path: str, headers: dict[str, str] | None = None) -> str:
    with client.websocket_connect(path, headers=dict(headers or {})) as ws:
        return str(ws.receive_text())


def _closed_code(client: TestClient, path: str, headers: dict[str, str] | None = None) -> int:
    """The close code of a WebSocket refused before accept (fails if it was served)."""
    with pytest.raises(WebSocketDisconnect) as closed:
        _opened(client, path, headers)
    return int(closed.value.code)


@pytest.mark.parametrize(
    ("path", "key"),
    [(API_WS, None), (API_WS, "sk_not-a-key-0123456789"), (ADMIN_WS, None), (ADMIN_WS, ALICE)],
    ids=["api-no-key", "api-bad-key", "admin-no-key", "admin-user-key"],
)
def test_websocket_without_the_right_key_is_refused_before_accept(
    app: FastAPI, path: str, key: str | None
) -> None:
    assert _closed_code(TestClient(app), path, bearer(key) if key else None) == 1008


def test_websocket_with_the_right_key_is_served(app: FastAPI) -> None:
    client = TestClient(app)
    assert _opened(client, API_WS, bearer(ALICE)) == "hello"
    assert _opened(client, ADMIN_WS, bearer(ROOT)) == "hello"


@pytest.mark.parametrize(
    ("admin", "path"),
    [(False, ADMIN_WS), (True, API_WS)],
    ids=["admin-route-on-api-port", "api-route-on-admin-port"],
)
def test_websocket_on_the_wrong_listener_is_not_found(app: FastAPI, admin: bool, path: str) -> None:
    assert _closed_code(TestClient(Listener(app, admin=admin)), path, bearer(ROOT)) == 1008


async def _run(guard: Any, scope: Scope) -> tuple[list[Message], list[str]]:
    """The guard's messages for one scope, and the scope types that reached the app."""
    sent: list[Message] = []
    reached: list[str] = []

    async def inner(scope: Scope, receive: Receive, send: Send) -> None:
        reached.append(scope["type"])

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(msg: Message) -> None:
        sent.append(msg)

    await guard(inner)(scope, receive, send)
    return sent, reached


def _guards() -> list[Any]:
    keyring = load_keyring(keyed_config().auth)
    return [lambda a: AuthGuard(a, keyring), lambda a: Listener(a, admin=False)]


@pytest.mark.parametrize("guard", _guards(), ids=["auth", "listener"])
async def test_a_refused_websocket_gets_one_close_and_never_reaches_the_app(guard: Any) -> None:
    scope = {
        "type": "websocket",
        "path": ADMIN_WS,
        "headers": [],
        "extensions": {"websocket.http.response": {}},
    }
    sent, reached = await _run(guard, scope)
    assert sent == [{"type": "websocket.close", "code": 1008}] and reached == []


@pytest.mark.parametrize("guard", _guards(), ids=["auth", "listener"])
async def test_lifespan_passes_both_guards(guard: Any) -> None:
    sent, reached = await _run(guard, {"type": "lifespan"})
    assert sent == [] and reached == ["lifespan"]
