"""An ASGI app served by uvicorn in a thread on a free loopback port, for tests
that need a real HTTP server (raw sockets, the load loops)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from tests.waits import HUNG_S, wait_until


@contextmanager
def served(app: Any, **config: Any) -> Iterator[int]:
    """The port ``app`` is served on until the block ends (uvicorn options in ``config``)."""
    options = {"host": "127.0.0.1", "port": 0, "log_level": "error", **config}
    server = uvicorn.Server(uvicorn.Config(app, **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), HUNG_S, "uvicorn to start", 0.02)
    assert server.started, "uvicorn did not start"
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)
