"""Serve the gateway's app on one listener, or on two (API and admin) in one process.

With ``gateway.admin_port`` set, two uvicorn servers share one event loop and
one app (one GatewayState, one set of metrics): the API listener answers 404 on
admin routes and the admin listener answers 404 on everything else. Only the API
server runs the app's lifespan; signals stop both.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from typing import Any

import uvicorn
from starlette.types import ASGIApp

from gateway.auth import Listener

COMMON: dict[str, Any] = {
    "loop": "uvloop", "http": "httptools", "access_log": False, "timeout_graceful_shutdown": 5,
}  # fmt: skip


class _Server(uvicorn.Server):
    """A server that leaves signals to :func:`serve_both` (uvicorn's own capture
    would let the second server's handler hide the first's)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def servers(
    app: ASGIApp, host: str, port: int, admin_host: str, admin_port: int, log_level: str
) -> list[uvicorn.Server]:
    api = uvicorn.Config(Listener(app, admin=False), host=host, port=port,
                         log_level=log_level, lifespan="on", **COMMON)  # fmt: skip
    admin = uvicorn.Config(Listener(app, admin=True), host=admin_host, port=admin_port,
                           log_level=log_level, lifespan="off", **COMMON)  # fmt: skip
    return [_Server(api), _Server(admin)]


async def serve_both(both: list[uvicorn.Server]) -> None:
    """Run the servers until a signal (or one of them stops): then stop them all."""
    loop = asyncio.get_running_loop()

    def stop() -> None:
        for s in both:
            s.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    tasks = [asyncio.create_task(s.serve()) for s in both]
    # The admin server waits for the API server's lifespan start-up (state ready).
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    stop()
    await asyncio.gather(*tasks, return_exceptions=True)
