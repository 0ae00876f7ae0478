"""sluicebench.ready.wait_ready: the one readiness wait of the benchmarks."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from sluice.local.redis_server import free_port
from sluicebench.ready import wait_ready


class _Flaky(BaseHTTPRequestHandler):
    """503 for the first two looks, then 200."""

    looks = 0

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).looks += 1
        self.send_response(200 if type(self).looks > 2 else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Flaky.looks = 0
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/readyz"
    finally:
        srv.shutdown()
        srv.server_close()


def test_it_waits_past_answers_not_yet_good_and_returns_true(server: str) -> None:
    assert wait_ready(server, 30, every_s=0.01)
    assert _Flaky.looks == 3


def test_a_custom_check_decides_what_ready_means(server: str) -> None:
    seen: list[int] = []

    def ok(resp: httpx.Response) -> bool:
        seen.append(resp.status_code)
        return resp.status_code == 503

    assert wait_ready(server, 30, ok, every_s=0.01)
    assert seen == [503]


def test_nothing_listening_runs_out_of_time_with_false() -> None:
    assert not wait_ready(f"http://127.0.0.1:{free_port()}/", 0.3, every_s=0.05)


def test_a_server_gone_raises_why() -> None:
    with pytest.raises(RuntimeError, match="exited with 3"):
        wait_ready(f"http://127.0.0.1:{free_port()}/", 30, exited=lambda: "exited with 3")
