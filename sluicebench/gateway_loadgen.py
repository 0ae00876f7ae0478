"""A small HTTP/1.1 load generator for the gateway benchmark.

Raw keep-alive connections over asyncio streams: an HTTP client library would
spend more CPU per request than the server under test, and on a shared 2-core
machine the client's cost is the benchmark's noise floor. Open-loop runs measure
latency from each request's *scheduled* time, so a slow server cannot hide its
queueing delay by slowing the client down (no coordinated omission).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Conn:
    """One keep-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self, host: str, port: int, headers: str = "") -> None:
        self.host, self.port = host, port
        self.headers = headers  # extra header lines, each ending in CRLF (e.g. an API key)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes | None = None) -> Reply:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n{self.headers}"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + (body or b""))
        assert self.reader is not None
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        data = await self.reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection") == "close":
            await self.close()
        return Reply(int(lines[0].split(" ", 2)[1]), headers, data)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


@dataclass
class RunResult:
    offered: float | None  # requests/s, None for a closed loop
    sent: int
    ok: int
    errors: int
    elapsed_s: float
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def throughput(self) -> float:
        return self.ok / self.elapsed_s if self.elapsed_s else 0.0

    def pct(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    def row(self) -> dict[str, Any]:
        return {
            "offered_rps": self.offered,
            "sent": self.sent,
            "ok": self.ok,
            "errors": self.errors,
            "throughput_rps": round(self.throughput, 1),
            "p50_ms": round(self.pct(0.50), 2),
            "p99_ms": round(self.pct(0.99), 2),
        }


async def open_loop(
    host: str,
    port: int,
    path: str,
    body: bytes,
    rate: float,
    duration_s: float,
    ok_status: int,
    connections: int = 64,
    headers: str = "",
) -> RunResult:
    """Send at a fixed rate; latency counts from the scheduled send time."""
    pool: asyncio.Queue[Conn] = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(Conn(host, port, headers))
    res = RunResult(rate, 0, 0, 0, 0.0)
    loop = asyncio.get_running_loop()
    start = loop.time()
    n = int(rate * duration_s)

    async def one(scheduled: float) -> None:
        conn = await pool.get()
        try:
            reply = await conn.request("POST", path, body)
            good = reply.status == ok_status
        except (OSError, asyncio.IncompleteReadError):
            good = False
            await conn.close()
        finally:
            pool.put_nowait(conn)
        if good:
            res.ok += 1
            res.latencies_ms.append((loop.time() - scheduled) * 1000)
        else:
            res.errors += 1

    tasks = []
    for i in range(n):
        scheduled = start + i / rate
        delay = scheduled - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(scheduled)))
        res.sent += 1
    await asyncio.gather(*tasks)
    res.elapsed_s = max(duration_s, loop.time() - start)
    while not pool.empty():  # an open socket left to the GC is a ResourceWarning
        await pool.get_nowait().close()
    return res


async def closed_loop(
    host: str,
    port: int,
    path: str,
    body: bytes,
    duration_s: float,
    ok_status: int,
    connections: int = 32,
    headers: str = "",
) -> RunResult:
    """Each connection sends back to back: the server's saturation throughput."""
    res = RunResult(None, 0, 0, 0, 0.0)
    loop = asyncio.get_running_loop()
    start = loop.time()
    stop = start + duration_s

    async def worker() -> None:
        conn = Conn(host, port, headers)
        while loop.time() < stop:
            t0 = loop.time()
            res.sent += 1
            try:
                reply = await conn.request("POST", path, body)
            except (OSError, asyncio.IncompleteReadError):
                res.errors += 1
                await conn.close()
                continue
            if reply.status == ok_status:
                res.ok += 1
                res.latencies_ms.append((loop.time() - t0) * 1000)
            else:
                res.errors += 1
        await conn.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    res.elapsed_s = loop.time() - start
    return res
