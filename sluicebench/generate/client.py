"""The streaming client: one request over OpenAI's ``/v1/completions`` with
``stream: true``, and the closed and open loops that drive many.

Each request is timed on this process's ``perf_counter``: from when it was sent
(the open loop: when it was due, so a server that keeps arrivals waiting is
charged for it) to each Server-Sent Event that carries text. A chunk's tokens
are counted from ``usage`` at the end when the server sends it
(``stream_options.include_usage``), otherwise one token per chunk.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from sluicebench.generate.workload import Request

DONE = "[DONE]"
REQUEST_TIMEOUT_S = 300.0
DRAIN_S = 60.0  # a closed loop's requests in flight at its end get this long


@dataclass
class Trace:
    """One request as the client saw it (seconds on one clock)."""

    rid: int
    max_tokens: int
    sent_s: float
    chunks: list[tuple[float, int]] = field(default_factory=list)  # (arrived, tokens)
    done_s: float | None = None
    usage_tokens: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.done_s is not None

    @property
    def tokens(self) -> int:
        return (
            self.usage_tokens if self.usage_tokens is not None else sum(n for _, n in self.chunks)
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trace:
        d = dict(d)
        d["chunks"] = [(float(t), int(n)) for t, n in d.get("chunks", [])]
        return cls(**d)


@dataclass(frozen=True)
class Target:
    """An OpenAI-style completions endpoint."""

    url: str
    model: str
    path: str = "/v1/completions"
    # OpenAI's API takes a list of token ids as the prompt; Sluice's gateway takes
    # text only (it tokenizes, as it must to admit the job).
    prompt_as_ids: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # a server's own switches

    def body(self, req: Request) -> dict[str, Any]:
        return self.extra | {
            "model": self.model,
            "prompt": list(req.prompt_ids) if self.prompt_as_ids else req.text,
            "max_tokens": req.max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }


def parse_event(data: str, trace: Trace, now: float) -> bool:
    """Fold one SSE ``data:`` payload into ``trace``; True at the end of the stream."""
    if data.strip() == DONE:
        return True
    event = json.loads(data)
    if "error" in event:
        trace.error = str(event["error"])[:200]
        return True
    usage = event.get("usage")
    if usage:
        trace.usage_tokens = int(usage.get("completion_tokens", 0))
    for choice in event.get("choices") or ():
        ids = choice.get("token_ids")
        n = len(ids) if isinstance(ids, list) else (1 if choice.get("text") else 0)
        if n:
            trace.chunks.append((now, n))
    return False


async def stream_one(
    client: httpx.AsyncClient, target: Target, req: Request, sent_s: float
) -> Trace:
    trace = Trace(req.rid, req.max_tokens, sent_s)
    try:
        async with client.stream("POST", target.url + target.path, json=target.body(req)) as resp:
            if resp.status_code != 200:
                body = (await resp.aread())[:200]
                trace.error = f"HTTP {resp.status_code}: {body.decode(errors='replace')}"
                return trace
            async for line in resp.aiter_lines():
                if line.startswith("data:") and parse_event(
                    line[5:].strip(), trace, time.perf_counter()
                ):
                    break
        if trace.error is None:
            trace.done_s = time.perf_counter()
    except (httpx.HTTPError, json.JSONDecodeError, OSError) as e:
        trace.error = f"{type(e).__name__}: {e}"[:200]
    return trace


def _client(connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(timeout=httpx.Timeout(REQUEST_TIMEOUT_S), limits=limits)


@dataclass
class LoopResult:
    """What one loop measured: every request's trace and the loop's clock."""

    start_s: float
    window_s: tuple[float, float]  # the measured window, offsets from start_s
    traces: list[Trace]
    wall_s: float  # start to the last answer
    cut: int = 0  # requests still streaming when the drain ran out (not in traces)


async def closed_loop(
    target: Target,
    reqs: Iterator[Request],
    concurrency: int,
    duration_s: float,
    warm_s: float,
    drain_s: float = DRAIN_S,
) -> LoopResult:
    """``concurrency`` clients, each sending its next request when its last one ended,
    until ``duration_s``; the requests in flight then have ``drain_s`` to finish
    (the rest are cut: a server slowed to a crawl does not hold the run). The
    window [warm_s, duration_s] is where throughput is counted."""
    traces: list[Trace] = []
    start = time.perf_counter()
    async with _client(concurrency) as client:

        async def one_client() -> None:
            for req in reqs:  # one iterator shared by every client
                if time.perf_counter() - start >= duration_s:
                    return
                traces.append(await stream_one(client, target, req, time.perf_counter()))

        tasks = [asyncio.create_task(one_client()) for _ in range(concurrency)]
        _, pending = await asyncio.wait(tasks, timeout=duration_s + drain_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    wall = time.perf_counter() - start
    return LoopResult(start, (warm_s, duration_s), traces, wall, cut=len(pending))


async def open_loop(target: Target, reqs: list[Request], offsets: list[float]) -> LoopResult:
    """Request i sent at ``offsets[i]`` whatever came back before (Poisson arrivals)."""
    start = time.perf_counter()
    tasks = []
    async with _client(max(len(offsets), 1)) as client:
        for req, offset in zip(reqs, offsets, strict=False):
            due = start + offset
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(stream_one(client, target, req, due)))
        traces = list(await asyncio.gather(*tasks))
    wall = time.perf_counter() - start
    return LoopResult(start, (0.0, wall), traces, wall)  # tokens/s: all, to the last one
