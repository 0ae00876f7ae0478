"""A Redis restart: 503 and not ready while it is down, then back without a gateway restart."""

from __future__ import annotations

import asyncio

import httpx

from gateway.app import create_app
from sluice.jobs import Outcome
from sluice.local.redis_server import start_redis
from sluice.queue import AsyncQueueClient
from sluice.queue.client import connect_async
from tests.kit.gateway import gateway_config
from tests.waits import async_wait_until


async def _until(c: httpx.AsyncClient, path: str, status: int, timeout_s: float = 10) -> None:
    async def answers() -> bool:
        return (await c.get(path)).status_code == status

    await async_wait_until(answers, timeout_s, f"{path} to answer {status}", every_s=0.1)


async def test_gateway_recovers_after_redis_restarts() -> None:
    cfg = gateway_config(gateway={"redis_timeout_s": 0.5})
    server = start_redis()
    port = server.port
    app = create_app(cfg, server.url)
    transport = httpx.ASGITransport(app=app)
    try:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
                assert (await c.get("/readyz")).status_code == 200
                server.stop()
                await _until(c, "/readyz", 503)
                resp = await c.post("/v1/models/m/jobs", json={"input": "x"})
                assert resp.status_code == 503
                server = start_redis(port=port)
                await _until(c, "/readyz", 200)  # the subscription is back too
                job = (await c.post("/v1/models/m/jobs", json={"input": "x"})).json()["id"]
                poll = asyncio.create_task(c.get(f"/v1/jobs/{job}", params={"wait": 5}))
                await asyncio.sleep(0.2)
                side = connect_async(server.url)
                await AsyncQueueClient(side, dict(cfg.models)).complete("m", [Outcome.ok(job, 7)])
                await side.aclose()
                body = (await asyncio.wait_for(poll, 5)).json()
                assert body["status"] == "succeeded" and body["result"] == 7
    finally:
        server.stop()
