"""Clients send the API key: Client(api_key=), $SLUICE_API_KEY, the load generator."""

from __future__ import annotations

import httpx
import pytest

from sluice.client import Client, auth_headers
from sluicebench.loadgen.http import LeanEngine


def _echo_auth(seen: list[str | None]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(202, json={"id": "m.1", "status": "queued"})

    return httpx.MockTransport(handler)


def test_client_sends_the_given_key_or_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str | None] = []
    monkeypatch.delenv("SLUICE_API_KEY", raising=False)
    with Client("http://gw", transport=_echo_auth(seen)) as c:
        c.submit("m", "x")
    with Client("http://gw", transport=_echo_auth(seen), api_key="sk_given") as c:
        c.submit("m", "x")
    monkeypatch.setenv("SLUICE_API_KEY", "sk_from_env")
    with Client("http://gw", transport=_echo_auth(seen)) as c:
        c.submit("m", "x")
    assert seen == [None, "Bearer sk_given", "Bearer sk_from_env"]


def test_load_generator_engines_send_the_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_API_KEY", "sk_load")
    assert auth_headers() == {"Authorization": "Bearer sk_load"}
    assert b"Authorization: Bearer sk_load\r\n" in LeanEngine("http://127.0.0.1:1", 1.0).host_header
    monkeypatch.delenv("SLUICE_API_KEY")
    assert b"Authorization" not in LeanEngine("http://127.0.0.1:1", 1.0).host_header
