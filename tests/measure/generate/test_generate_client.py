"""The generate benchmark's streaming client against a stub OpenAI server on
loopback: the closed loop keeps its clients busy and cuts what outlives its
drain, the open loop sends every arrival, and each trace holds one chunk per
token with the usage at the end."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from sluicebench.generate.client import Target, closed_loop, open_loop
from sluicebench.generate.workload import requests
from tests.kit.served import served


def stub(hang_over: int = 10_000) -> FastAPI:
    """Streams ``max_tokens`` one-token chunks; a request for more than
    ``hang_over`` tokens never ends."""
    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(request: Request) -> StreamingResponse:
        body = await request.json()
        n = int(body["max_tokens"])

        async def sse() -> AsyncIterator[bytes]:
            for i in range(n):
                yield f"data: {json.dumps({'choices': [{'text': f't{i}'}]})}\n\n".encode()
                await asyncio.sleep(0)
            if n > hang_over:
                await asyncio.sleep(3600)
            usage = {"choices": [], "usage": {"completion_tokens": n}}
            yield f"data: {json.dumps(usage)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(sse(), media_type="text/event-stream")

    return app


def test_the_loops_stream_every_request_and_count_its_tokens() -> None:
    reqs = requests(30, 1, 1000)
    with served(stub()) as port:
        target = Target(f"http://127.0.0.1:{port}", "tiny")
        closed = asyncio.run(closed_loop(target, iter(reqs[:12]), 4, 60.0, 0.0))
        opened = asyncio.run(open_loop(target, reqs[12:], [0.0, 0.01, 0.02]))
    assert sorted(t.rid for t in closed.traces) == list(range(12)) and closed.cut == 0
    assert [t.rid for t in opened.traces] == [12, 13, 14]
    for t in closed.traces + opened.traces:
        assert t.ok and t.tokens == t.max_tokens and len(t.chunks) == t.max_tokens


def test_a_closed_loop_cuts_what_outlives_its_drain() -> None:
    reqs = requests(40, 1, 1000)
    with served(stub(hang_over=100)) as port:
        target = Target(f"http://127.0.0.1:{port}", "tiny")
        # 2 s to send in: the loop's clock starts before its HTTP client is built, and
        # on a loaded machine a 0.3 s window passed before either client sent anything.
        # Requests 4 and 6 of this seed ask for 256 tokens and hang; the tiny ones
        # before them end in milliseconds, so both clients are hung long before 2 s.
        loop = asyncio.run(closed_loop(target, iter(reqs), 2, 2.0, 0.0, drain_s=0.5))
    assert [r.max_tokens for r in reqs[:7]] == [16, 64, 64, 16, 256, 16, 256]  # the seed's
    assert loop.cut >= 1  # a 256-token request hangs: its client is cut, not waited for
    assert loop.traces  # the requests before it were answered
    assert all(t.max_tokens <= 100 for t in loop.traces)
