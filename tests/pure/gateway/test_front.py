"""The hot routes' front (gateway.front, ADR 0174): which requests it answers ahead of
FastAPI's middleware stack, and that an error no handler takes ends as the stack ends
it (tests/pure/gateway/test_lean_routes.py compares every other answer)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import fakeredis
import httpx
import pytest
from fakeredis import aioredis as fake_aioredis
from starlette.types import Receive, Scope, Send

import gateway.lean
import gateway.routers.jobs
from gateway.app import create_app
from sluice.config import parse_config

JOBS = "/v1/models/m/jobs"
JSON = {"content-type": "application/json"}
MAX_BODY = 1024


class Counting:
    """An ASGI app passing everything to ``app``, counting the HTTP requests."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.calls = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += scope["type"] == "http"
        await self.app(scope, receive, send)


@asynccontextmanager
async def gateway_app(lean: bool, raise_errors: bool = True) -> AsyncIterator[Any]:
    r = fake_aioredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True)
    cfg = parse_config(
        {
            "models": {"m": {"handler": "synthetic", "autoscaling": {"min_replicas": 0}}},
            "gateway": {"max_body_bytes": MAX_BODY},
        }
    )
    app = create_app(cfg, redis=r, lean=lean)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(app.router.lifespan_context(app))
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_errors)
        client = httpx.AsyncClient(transport=transport, base_url="http://gw")
        await stack.enter_async_context(client)
        yield app, client


async def test_plain_hot_requests_skip_the_stack_and_the_rest_go_down_it() -> None:
    async with gateway_app(lean=True) as (app, client):
        await client.get("/healthz")  # the stack is built on first use
        inner = app.middleware_stack.app = Counting(app.middleware_stack.app)
        ok = await client.post(JOBS, json={"input": "a b"})
        assert ok.status_code == 202 and inner.calls == 0
        over = b'{"input": "' + b"a " * MAX_BODY + b'"}'  # valid JSON, over the limit
        for body, headers, status in [
            (b"{", JSON, 422),  # not JSON: replayed to the stack, which answers it
            (b'{"input": "a"}', {"content-type": "text/plain"}, 415),  # BodyGuard's
            (over, JSON, 413),  # over max_body_bytes: BodyGuard's
        ]:
            before = inner.calls
            resp = await client.post(JOBS, content=body, headers=headers)
            assert resp.status_code == status and inner.calls == before + 1


async def test_plain_job_reads_skip_the_stack_and_the_rest_go_down_it() -> None:
    """GET /v1/jobs/{job_id} (ADR 0178): a plain read, long-poll included, is answered
    ahead of the stack and counted under its route; the rest go down the stack."""
    async with gateway_app(lean=True) as (app, client):
        job = (await client.post(JOBS, json={"input": "a b"})).json()["id"]
        inner = app.middleware_stack.app = Counting(app.middleware_stack.app)
        for query in ["", "?wait=0", "?wait=0.01", "?x=1"]:
            resp = await client.get(f"/v1/jobs/{job}{query}")
            assert resp.status_code == 200 and inner.calls == 0, query
        assert (await client.get("/v1/jobs/nope")).status_code == 404  # the lean path's 404
        assert inner.calls == 0
        for path in [f"/v1/jobs/{job}?wait=61", f"/v1/jobs/{job}?wait=1e-2", "/v1/jobs/a/"]:
            before = inner.calls
            await client.get(path)
            assert inner.calls == before + 1, path
        before = inner.calls
        await client.head(f"/v1/jobs/{job}")
        await client.request("GET", f"/v1/jobs/{job}", content=b"{}", headers=JSON)
        assert inner.calls == before + 2
        counted = {
            (s.labels["route"], s.labels["method"], s.labels["status"]): s.value
            for m in app.state.gateway.metrics.requests.collect()
            for s in m.samples
            if s.name.endswith("_total")
        }
        assert counted[("/v1/jobs/{job_id}", "GET", "200")] == 6.0  # 4 here, 2 down the stack


@pytest.mark.parametrize("lean", [True, False])
async def test_an_error_no_handler_takes_is_the_500_answer_then_raised(
    lean: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def boom(*_: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(gateway.lean, "submit_answer", boom)
    monkeypatch.setattr(gateway.routers.jobs, "submit_answer", boom)
    async with gateway_app(lean) as (_, client):
        with pytest.raises(RuntimeError, match="boom"):  # on to the server, which logs it
            await client.post(JOBS, json={"input": "a"})
    async with gateway_app(lean, raise_errors=False) as (app, client):
        resp = await client.post(JOBS, json={"input": "a"})
        assert resp.status_code == 500
        assert resp.json() == {"error": {"type": "internal", "message": "internal error"}}
        counted = {
            (s.labels["route"], s.labels["status"]): s.value
            for m in app.state.gateway.metrics.requests.collect()
            for s in m.samples
            if s.name.endswith("_total")
        }
        assert counted == {("/v1/models/{model}/jobs", "500"): 1.0}
