"""uvicorn's httptools protocol with a response's writes joined into one send (ADR 0174).

uvicorn writes a response's head (status line and headers) and its body as two
``transport.write`` calls, so a predict's answer costs two ``send`` syscalls on a
socket whose peer is woken by the first with half an answer. :class:`JoinedWrites`
wraps the connection's transport: writes made in one event-loop turn are joined
and sent once, at the start of the next turn (``call_soon``), before anything
else is read from the loop's ready queue after them; closing sends what is held
first. Bytes and their order are unchanged, only their grouping into sends.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class JoinedWrites:
    """A transport whose writes of one loop turn go out as one write."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.loop = loop
        self.held: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self.held:
            self.loop.call_soon(self.flush)
        self.held.append(data)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        if not self.held:
            return
        data = self.held[0] if len(self.held) == 1 else b"".join(self.held)
        self.held = []
        if not self.transport.is_closing():  # a connection gone: nothing to send to
            self.transport.write(data)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def write_eof(self) -> None:
        self.flush()
        self.transport.write_eof()

    def get_write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() + sum(map(len, self.held))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class JoinedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a :class:`JoinedWrites` transport."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(JoinedWrites(transport, self.loop))  # type: ignore[arg-type]
