"""The bad-input rows only a real HTTP server can show: raw sockets against uvicorn."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from gateway.app import create_app
from sluice.local.redis_server import RedisServer
from tests.kit.bad_input import LIMIT, bad_input_config, doc_table
from tests.kit.served import served

HEAD = b"POST /v1/models/m/jobs HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
CHUNK = b"400\r\n" + b" " * 1024 + b"\r\n"


@pytest.fixture(scope="module")
def port(redis_server: RedisServer) -> Iterator[int]:
    app = create_app(bad_input_config(), redis_server.url)
    with served(app, loop="uvloop", http="httptools") as p:
        yield p


def exchange(port: int, head: bytes, chunks: int = 0, timeout_s: float = 5.0) -> tuple[bytes, int]:
    """Send ``head`` then up to ``chunks`` 1 KiB chunks; the reply and the chunks sent."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(head)
        try:
            for _ in range(chunks):
                s.sendall(CHUNK)
                sent += 1
            if chunks:
                s.sendall(b"0\r\n\r\n")
        except OSError:  # the server closed on us: what a refusal may do
            pass
        reply = b""
        try:
            while b"\r\n\r\n" not in reply or not _complete(reply):
                data = s.recv(65536)
                if not data:
                    break
                reply += data
        except (ConnectionResetError, TimeoutError):
            pass
    return reply, sent


def _complete(reply: bytes) -> bool:
    head, _, rest = reply.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(rest) >= int(line.split(b":")[1])
    return False


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def error_of(reply: bytes) -> dict[str, str]:
    err = json.loads(reply.partition(b"\r\n\r\n")[2])["error"]
    assert set(err) == {"type", "message"}
    return dict(err)


def test_a_huge_declared_length_is_refused_before_the_body(port: int) -> None:
    row = doc_table()["lying-length-huge"]
    t0 = time.monotonic()
    reply, _ = exchange(port, HEAD + b"Content-Length: 1000000000000\r\n\r\n" + b'{"input":"x"}')
    assert status_of(reply) == row.status
    err = error_of(reply)
    assert err["type"] == row.type and str(LIMIT) in err["message"]
    # Answered, not after waiting for 1 TB: a server waiting for the body would
    # leave exchange() empty at its 5 s timeout; this bound only fails a hang.
    assert time.monotonic() - t0 < 20


def test_length_and_chunked_together_cannot_smuggle_a_big_body(port: int) -> None:
    row = doc_table()["length-and-chunked"]
    head = HEAD + b"Content-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n"
    reply, _ = exchange(port, head, chunks=50)
    assert status_of(reply) == row.status and row.type is None


def test_a_chunked_body_over_the_limit_is_cut_off_and_the_connection_closed(port: int) -> None:
    row = doc_table()["chunked-over-limit"]
    head = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
    reply, _ = exchange(port, head, chunks=LIMIT // 1024 + 100)
    assert status_of(reply) == row.status and error_of(reply)["type"] == row.type
    assert b"connection: close" in reply.lower()


def test_the_server_still_serves_after_the_bad_requests(port: int) -> None:
    body = b'{"input": "fine"}'
    reply, _ = exchange(port, HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    assert status_of(reply) == 202, reply
