"""The lean HTTP engine against a scripted asyncio server on loopback."""

from __future__ import annotations

import asyncio
import json

import pytest

from sluicebench.loadgen.http import EngineError, EngineTimeout, LeanEngine, make_engines


async def _serve(answers: list[bytes]) -> tuple[asyncio.Server, list[bytes], list[int]]:
    """Answers each request with the next canned response; records requests and connections."""
    requests: list[bytes] = []
    conns: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.append(1)
        try:
            while answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                requests.append(head + await reader.readexactly(length))
                answer = answers.pop(0)
                if answer == b"hang":
                    await asyncio.sleep(0.5)
                writer.write(answer)
                await writer.drain()
                if b"Connection: close" in answer or b"X-Drop" in answer:
                    break  # X-Drop: close silently, as a server's keep-alive timeout does
        except asyncio.IncompleteReadError:
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, requests, conns


def _url(server: asyncio.Server) -> str:
    return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/base"


async def test_keep_alive_chunked_and_close() -> None:
    body = json.dumps({"id": "m.1"}).encode()
    answers = [
        b"HTTP/1.1 202 Accepted\r\nContent-Length: %d\r\n\r\n" % len(body) + body,
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{"a"\r\n3\r\n:1}\r\n0\r\n\r\n',
        b"HTTP/1.1 429 Too Many\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnull",
    ]
    server, requests, conns = await _serve(answers)
    engine = LeanEngine(_url(server), timeout_s=2.0)
    assert await engine.call("POST", "/v1/jobs", {"input": "hi"}) == (202, {"id": "m.1"})
    assert await engine.call("GET", "/v1/jobs/m.1", params={"wait": "1.5"}) == (200, {"a": 1})
    assert await engine.call("GET", "/x") == (429, {})
    assert await engine.call("GET", "/y") == (200, None)
    await engine.aclose()
    server.close()
    assert len(conns) == 2  # kept alive until the server said close, then reconnected
    assert requests[0].startswith(b"POST /base/v1/jobs HTTP/1.1\r\n")
    assert requests[0].endswith(b'{"input":"hi"}')
    assert requests[1].startswith(b"GET /base/v1/jobs/m.1?wait=1.5 HTTP/1.1\r\n")


async def test_timeout_and_refused_are_engine_errors() -> None:
    server, _, _ = await _serve([b"hang"])
    url = _url(server)
    with pytest.raises(EngineTimeout):
        await LeanEngine(url, timeout_s=0.2).call("GET", "/slow")
    server.close()
    await server.wait_closed()
    await asyncio.sleep(0.6)  # the hung handler finishes
    with pytest.raises(EngineError):  # nothing listens on the port any more
        await LeanEngine(url, timeout_s=1.0).call("GET", "/gone")


async def test_a_kept_alive_connection_the_server_dropped_is_retried_once() -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    server, requests, conns = await _serve([ok[:17] + b"X-Drop: 1\r\n" + ok[17:], ok])
    engine = LeanEngine(_url(server), timeout_s=2.0)
    assert await engine.call("GET", "/a") == (200, {})
    await asyncio.sleep(0.05)  # the server has closed the connection meanwhile
    assert await engine.call("POST", "/b", {"x": 1}) == (200, {})
    await engine.aclose()
    server.close()
    assert len(conns) == 2 and len(requests) == 2  # the second went once, on a new connection


def test_engine_choice() -> None:
    assert isinstance(make_engines("auto", "http://h:1", 1.0, 64)[0], LeanEngine)
    assert len(make_engines("auto", "https://h", 1.0, 64)) == 8  # httpx, 8 slots per client
    with pytest.raises(ValueError):
        make_engines("lean", "https://h", 1.0, 1)


async def test_send_passes_encoded_bytes_and_only_the_headers_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The gateway benchmark's loops send one pre-encoded body with the headers they name.
    monkeypatch.setenv("SLUICE_API_KEY", "sk_env")
    server, requests, _ = await _serve([b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\n{}"])
    engine = LeanEngine(_url(server), timeout_s=2.0, headers={"Authorization": "Bearer sk_x"})
    assert await engine.send("POST", "/jobs", b'{"input": "a b"}') == (202, b"{}")
    await engine.aclose()
    server.close()
    assert requests[0].startswith(b"POST /base/jobs HTTP/1.1\r\n")
    assert b"Authorization: Bearer sk_x\r\n" in requests[0]
    assert b"sk_env" not in requests[0]
    assert requests[0].endswith(b'\r\n\r\n{"input": "a b"}')
