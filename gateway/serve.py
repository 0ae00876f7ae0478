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
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

import uvicorn
from starlette.types import ASGIApp

from gateway.auth import Listener

COMMON: dict[str, Any] = {
    "loop": "uvloop",
    "http": "httptools",
    "access_log": False,
    "timeout_graceful_shutdown": 5,
}
EXIT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Server(uvicorn.Server):
    """One listener of a group. Signals are captured once for the whole group by
    :func:`serve_both` (uvicorn's per-server capture would let the second server's
    handler hide the first's); the group's handler is the first server's
    ``handle_exit``, which passes the signal on to the others."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.peers: list[uvicorn.Server] = []
        self.signals: list[int] = []

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.signals.append(sig)
        for s in (self, *self.peers):
            uvicorn.Server.handle_exit(s, sig, frame)


def servers(
    app: ASGIApp, host: str, port: int, admin_host: str, admin_port: int, log_level: str
) -> list[_Server]:
    api = uvicorn.Config(
        Listener(app, admin=False),
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        **COMMON,
    )
    admin = uvicorn.Config(
        Listener(app, admin=True),
        host=admin_host,
        port=admin_port,
        log_level=log_level,
        lifespan="off",
        **COMMON,
    )
    return [_Server(api), _Server(admin)]


@contextlib.contextmanager
def _exit_signals_to(lead: _Server) -> Iterator[None]:
    """SIGTERM/SIGINT go to ``lead.handle_exit`` through ``signal.signal``, as under
    uvicorn with one listener, never ``loop.add_signal_handler``: the gateway's hook
    that ends open long-polls first (ADR 0067) chains onto a uvicorn server's handler
    it finds with ``signal.getsignal``, which cannot see an event loop's handlers."""
    before = {}
    if threading.current_thread() is threading.main_thread():  # signals reach only it
        before = {sig: signal.signal(sig, lead.handle_exit) for sig in EXIT_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


async def serve_both(both: list[_Server]) -> None:
    """Run the servers until a signal (or one of them stops): then stop them all.

    Like uvicorn alone, the process then ends by the signal it got (SIGTERM: -15)."""
    lead = both[0]
    lead.peers = list(both[1:])
    with _exit_signals_to(lead):
        tasks = [asyncio.create_task(s.serve()) for s in both]
        # The admin server waits for the API server's lifespan start-up (state ready).
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for s in both:
            s.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)
    for sig in reversed(lead.signals):
        signal.raise_signal(sig)
