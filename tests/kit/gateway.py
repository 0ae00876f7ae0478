"""Gateway fixtures: the app in-process (httpx over ASGI) on fakeredis or a real Redis."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import fakeredis
import httpx
import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from fakeredis import aioredis as fake_aioredis

from gateway.app import create_app
from gateway.state import GatewayState
from sluice import registry
from sluice.config import SluiceConfig, parse_config
from sluice.queue import AsyncQueueClient
from sluice.queue.client import connect_async
from tests.conftest import gateway_kinds
from tests.factories import worker_info


def gateway_config(gateway: dict[str, Any] | None = None, **model: Any) -> SluiceConfig:
    """Models ``m`` (scales from zero, words) and ``pinned`` (min_replicas 1)."""
    m: dict[str, Any] = {
        "handler": "synthetic",
        "buckets": [32, 128, 512],
        "cost": {"method": "words"},
        "autoscaling": {"min_replicas": 0, "max_replicas": 2, "cold_start_s": 7},
    }
    m.update(model)
    pinned = {"handler": "synthetic", "autoscaling": {"min_replicas": 1, "cold_start_s": 9}}
    return parse_config(
        {
            "models": {"m": m, "pinned": pinned},
            "gateway": {"max_body_bytes": 4096, "max_batch_inputs": 8, **(gateway or {})},
        }
    )


@dataclass
class Harness:
    client: httpx.AsyncClient
    queue: AsyncQueueClient  # a second client on the same Redis, playing the worker
    redis: aioredis.Redis
    state: GatewayState
    kind: str

    async def refresh(self) -> None:
        await self.state.snapshots.refresh()

    async def heartbeat(self, model: str, state: str = "ready", rate: float = 0.0) -> None:
        now = time.time()
        info = worker_info(
            id=f"w-{state}",
            model=model,
            buckets=[],
            state=state,
            started_at=now,
            heartbeat_at=now,
            service_rate=rate,
        )
        pipe = self.redis.pipeline(transaction=False)
        for cmd in registry.heartbeat(info, 30):
            pipe.execute_command(*cmd)
        await pipe.execute()


HarnessFactory = Callable[..., Any]


@pytest.fixture(params=gateway_kinds())
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest_asyncio.fixture(loop_scope="function")
async def make_gateway(kind: str, request: pytest.FixtureRequest) -> AsyncIterator[HarnessFactory]:
    """``async with make_gateway(cfg) as h`` -- the app with its lifespan running."""
    from contextlib import asynccontextmanager

    url = request.getfixturevalue("redis_url") if kind == "real" else None

    @asynccontextmanager
    async def make(cfg: SluiceConfig | None = None) -> AsyncIterator[Harness]:
        cfg = cfg or gateway_config()
        if kind == "fake":
            server = fakeredis.FakeServer()
            r = fake_aioredis.FakeRedis(server=server, decode_responses=True)
            side = fake_aioredis.FakeRedis(server=server, decode_responses=True)
            app = create_app(cfg, redis=r)
        else:
            app = create_app(cfg, url)
            side = connect_async(str(url))
        transport = httpx.ASGITransport(app=app)
        try:
            async with app.router.lifespan_context(app):
                async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
                    yield Harness(
                        c, AsyncQueueClient(side, dict(cfg.models)), side, app.state.gateway, kind
                    )
        finally:
            await side.aclose()

    yield make


@pytest_asyncio.fixture(loop_scope="function")
async def gw(make_gateway: HarnessFactory) -> AsyncIterator[Harness]:
    async with make_gateway() as h:
        yield h


OPENAI_PATH = "/v1/embeddings"
OPENAI_PATHS = {OPENAI_PATH, "/v1/completions", "/v1/chat/completions"}


def error_keys(path: str) -> set[str]:
    """The keys of an error body on ``path``: OpenAI's under its paths, else Sluice's."""
    return {"message", "type", "param", "code"} if path in OPENAI_PATHS else {"type", "message"}


def waited_out(path: str, resp: Any) -> bool:
    """The one 5xx a fuzzed request may get: ``/v1/embeddings`` waits for workers,
    and with none running its (valid) jobs time out: 504, code ``timeout``."""
    if path != OPENAI_PATH or resp.status_code != 504:
        return False
    return bool(resp.json()["error"]["code"] == "timeout")
