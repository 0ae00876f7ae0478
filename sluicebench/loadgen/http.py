"""The measurement package's HTTP engines: httpx, and the one lean HTTP/1.1 client.

The lean client serves every benchmark that loads a gateway over loopback: the
load generator (``sluice bench load``, stack, soak, bulk) and the gateway
benchmark's open and closed loops (sluicebench.gateway_loops).

Measured on this team's 2-core machine against the gateway: httpx spent about
1.2 ms of CPU per request, more than the gateway itself (about 0.6 ms), so a
load generator built on it measured mostly itself. The lean engine (asyncio
streams, keep-alive, JSON bodies, Content-Length or chunked responses) spends
about 0.1 ms. It speaks plain ``http://`` only; ``https://`` uses httpx.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit

import httpx

from sluice.client import auth_headers

ENGINES = ("auto", "lean", "httpx")
# Below uvicorn's default keep-alive timeout (5 s): older idle connections are dropped.
IDLE_MAX_S = 4.0


class EngineTimeout(Exception):
    """The request did not complete in time."""


class EngineError(Exception):
    """The connection failed or the answer was not HTTP we understand."""


class Engine(Protocol):
    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """Status and decoded JSON body (None when the body is not JSON)."""
        ...

    async def aclose(self) -> None: ...


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


class HttpxEngine:
    """httpx.AsyncClient with a small pool (its pool slows down with many connections)."""

    def __init__(
        self,
        url: str,
        timeout_s: float,
        conns: int,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        limits = httpx.Limits(max_connections=conns, max_keepalive_connections=conns)
        self.http = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            limits=limits,
            timeout=httpx.Timeout(timeout_s, pool=None),
            transport=transport,
            headers=auth_headers(),
        )

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        try:
            resp = await self.http.request(method, path, json=body, params=params, headers=headers)
        except httpx.TimeoutException as e:
            raise EngineTimeout(str(e)) from e
        except httpx.HTTPError as e:
            raise EngineError(str(e)) from e
        return resp.status_code, _decode(resp.content)

    async def aclose(self) -> None:
        await self.http.aclose()


_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class LeanEngine:
    """HTTP/1.1 over asyncio streams with a pool of keep-alive connections."""

    def __init__(
        self, url: str, timeout_s: float | None, headers: dict[str, str] | None = None
    ) -> None:
        """``headers`` go on every request; by default $SLUICE_API_KEY's ``Authorization``.

        ``timeout_s`` None: no deadline per request (a timer per request costs CPU the
        gateway benchmark's saturation loop would measure)."""
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the lean engine speaks plain http://host:port, got {url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        self.idle: list[tuple[_Conn, float]] = []  # (connection, idle since)
        self.host_header = f"Host: {parts.netloc}\r\n".encode()
        for name, value in (auth_headers() if headers is None else headers).items():
            self.host_header += f"{name}: {value}\r\n".encode("latin-1")

    def _reuse(self) -> _Conn | None:
        now = time.monotonic()
        while self.idle:
            conn, since = self.idle.pop()
            if now - since < IDLE_MAX_S and not conn[0].at_eof():
                return conn
            _close(conn)
        return None

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        target = path + (f"?{urlencode(params)}" if params else "")
        payload = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        status, raw = await self.send(method, target, payload, headers)
        return status, _decode(raw)

    async def send(
        self,
        method: str,
        target: str,
        payload: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """Status and raw body; ``payload`` is JSON already encoded (sent as it is)."""
        target = self.prefix + target
        head = f"{method} {target} HTTP/1.1\r\n".encode() + self.host_header
        if payload is not None:
            head += b"Content-Type: application/json\r\n"
        else:
            payload = b""
        for name, value in (headers or {}).items():
            head += f"{name}: {value}\r\n".encode("latin-1")
        request = head + b"Content-Length: %d\r\n\r\n" % len(payload) + payload
        conn = self._reuse()
        try:
            async with asyncio.timeout(self.timeout_s):
                try:
                    conn, (status, raw, keep) = await self._exchange(conn, request)
                except _STALE as e:
                    if conn is None or not _unanswered(e):
                        raise
                    # The server closed a kept-alive connection before reading this
                    # request (its keep-alive timeout): nothing ran, so send it again.
                    _close(conn)
                    conn, (status, raw, keep) = await self._exchange(None, request)
        except TimeoutError as e:
            _close(conn)
            raise EngineTimeout(f"{method} {target}: no answer in {self.timeout_s}s") from e
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
            _close(conn)
            raise EngineError(f"{method} {target}: {e!r}") from e
        if keep:
            self.idle.append((conn, time.monotonic()))
        else:
            _close(conn)
        return status, raw

    async def _exchange(
        self, conn: _Conn | None, request: bytes
    ) -> tuple[_Conn, tuple[int, bytes, bool]]:
        fresh = conn is None
        if conn is None:
            conn = await asyncio.open_connection(self.host, self.port)
        try:
            conn[1].write(request)
            return conn, await _read_response(conn[0])
        except BaseException:
            if fresh:  # the caller only knows the connection it passed in
                _close(conn)
            raise

    async def aclose(self) -> None:
        while self.idle:
            _close(self.idle.pop()[0])


_STALE = (ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError)


def _unanswered(e: BaseException) -> bool:
    """True when not one byte of an answer came back."""
    return not isinstance(e, asyncio.IncompleteReadError) or not e.partial


def _close(conn: _Conn | None) -> None:
    if conn is not None:
        conn[1].close()


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip().lower()
    if headers.get("transfer-encoding") == "chunked":
        body = await _read_chunked(reader)
    else:
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, body, headers.get("connection") != "close"


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # no trailers from our gateway
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def make_engines(
    engine: str,
    url: str,
    timeout_s: float,
    in_flight: int,
    transport: httpx.AsyncBaseTransport | None = None,
) -> list[Engine]:
    """The engines one run shares out: one lean pool, or httpx clients of 8 connections each."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    lean_ok = urlsplit(url).scheme == "http" and transport is None
    if engine == "lean" or (engine == "auto" and lean_ok):
        return [LeanEngine(url, timeout_s)]
    per = 8
    count = max(1, -(-in_flight // per))
    return [HttpxEngine(url, timeout_s, per * 2, transport) for _ in range(count)]
