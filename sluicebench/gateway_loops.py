"""The gateway benchmark's load shapes: an open loop and a closed loop.

Both send over the measurement package's one lean HTTP/1.1 client
(sluicebench.loadgen.http.LeanEngine, keep-alive over asyncio streams): an HTTP
client library would spend more CPU per request than the server under test, and
on a shared 2-core machine the client's cost is the benchmark's noise floor.
Open-loop runs measure latency from each request's *scheduled* time, so a slow
server cannot hide its queueing delay by slowing the client down (no
coordinated omission).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from sluicebench.loadgen.http import EngineError, EngineTimeout, LeanEngine

# No deadline per request, as before the loops shared this client: a timer per
# request is client CPU, and the saturation loop measures the server's.
TIMEOUT_S = None


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


def engine(host: str, port: int, headers: dict[str, str]) -> LeanEngine:
    """A lean client sending exactly ``headers`` (not $SLUICE_API_KEY's) on each request."""
    return LeanEngine(f"http://{host}:{port}", TIMEOUT_S, headers=headers)


async def open_loop(
    host: str,
    port: int,
    path: str,
    body: bytes,
    rate: float,
    duration_s: float,
    ok_status: int,
    connections: int = 64,
    headers: dict[str, str] | None = None,
) -> RunResult:
    """Send at a fixed rate; latency counts from the scheduled send time."""
    client = engine(host, port, headers or {})
    slots = asyncio.Semaphore(connections)  # at most this many connections in use
    res = RunResult(rate, 0, 0, 0, 0.0)
    loop = asyncio.get_running_loop()
    start = loop.time()
    n = int(rate * duration_s)

    async def one(scheduled: float) -> None:
        async with slots:
            try:
                status, _ = await client.send("POST", path, body)
                good = status == ok_status
            except (EngineError, EngineTimeout):
                good = False
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
    await client.aclose()  # an open socket left to the GC is a ResourceWarning
    return res


async def closed_loop(
    host: str,
    port: int,
    path: str,
    body: bytes,
    duration_s: float,
    ok_status: int,
    connections: int = 32,
    headers: dict[str, str] | None = None,
) -> RunResult:
    """Each connection sends back to back: the server's saturation throughput."""
    client = engine(host, port, headers or {})
    res = RunResult(None, 0, 0, 0, 0.0)
    loop = asyncio.get_running_loop()
    start = loop.time()
    stop = start + duration_s

    async def sender() -> None:
        while loop.time() < stop:
            t0 = loop.time()
            res.sent += 1
            try:
                status, _ = await client.send("POST", path, body)
            except (EngineError, EngineTimeout):
                res.errors += 1
                continue
            if status == ok_status:
                res.ok += 1
                res.latencies_ms.append((loop.time() - t0) * 1000)
            else:
                res.errors += 1

    await asyncio.gather(*(sender() for _ in range(connections)))
    res.elapsed_s = loop.time() - start
    await client.aclose()
    return res
