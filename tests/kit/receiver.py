"""A webhook receiver on loopback for tests: records every request, answers as told."""

from __future__ import annotations

import http.server
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Call:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.time() when it arrived


@dataclass
class Receiver:
    """``statuses``: what the next calls answer, in order (then 200). A status of
    -1 holds the request until ``release`` is set (a slow receiver)."""

    port: int = 0
    host: str = "127.0.0.1"
    scheme: str = "http"
    statuses: list[int] = field(default_factory=list)
    location: str = ""  # sent with a 3xx
    retry_after: str = ""  # sent with every non-2xx answer when set
    body_bytes: int = 2  # the size of each answer's body
    calls: list[Call] = field(default_factory=list)
    connections: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}/hook"


def _handler(rx: Receiver) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            with rx.lock:
                rx.connections += 1
            super().setup()

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            n = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(n)
            with rx.lock:
                rx.calls.append(
                    Call(
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        time.time(),
                    )
                )
                status = rx.statuses.pop(0) if rx.statuses else 200
            if status == -1:
                rx.release.wait(60)
                status = 200
            self.send_response(status)
            if 300 <= status < 400 and rx.location:
                self.send_header("Location", rx.location)
            if rx.retry_after and not 200 <= status < 300:
                self.send_header("Retry-After", rx.retry_after)
            self.send_header("Content-Length", str(rx.body_bytes))
            self.end_headers()
            try:
                self.wfile.write(b"k" * rx.body_bytes)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the notifier stopped reading at its cap

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@contextmanager
def receiving(
    statuses: list[int] | None = None,
    port: int = 0,
    location: str = "",
    host: str = "127.0.0.1",
    tls: ssl.SSLContext | None = None,
) -> Iterator[Receiver]:
    """``tls``: serve https with this server context (the URL then names ``localhost``)."""
    rx = Receiver(port=port, host=host, statuses=list(statuses or []), location=location)
    server = http.server.ThreadingHTTPServer((host, port), _handler(rx))
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        rx.scheme, rx.host = "https", "localhost"
    server.daemon_threads = True
    rx.port = server.server_address[1]
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield rx
    finally:
        rx.release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)
