"""Security fixtures: the gateway in-process with API keys, on a real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest_asyncio

from gateway.app import create_app
from gateway.state import GatewayState
from sluice.apikeys import hash_key
from sluice.config import SluiceConfig
from sluice.queue import AsyncQueueClient
from sluice.queue.client import connect_async
from tests.factories import sluice_config

ALICE, BOB, ROOT = "sk_alice-0123456789abcdef", "sk_bob-0123456789abcdef", "sk_root-0123456789"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def keyed_config(
    keys: list[dict[str, Any]] | None = None, gateway: dict[str, Any] | None = None
) -> SluiceConfig:
    """Model ``m`` (scales from zero) with keys alice, bob and an admin, root."""
    entries = (
        keys
        if keys is not None
        else [
            {"name": "alice", "hash": hash_key(ALICE)},
            {"name": "bob", "hash": hash_key(BOB)},
            {"name": "root", "hash": hash_key(ROOT), "admin": True},
        ]
    )
    model = {"cost": {"method": "words"}, "autoscaling": {"min_replicas": 0, "max_replicas": 2}}
    return sluice_config(model, auth={"keys": entries}, gateway=gateway or {})


@dataclass
class Gw:
    client: httpx.AsyncClient
    queue: AsyncQueueClient  # plays the worker
    state: GatewayState
    app: Any


@pytest_asyncio.fixture(loop_scope="function")
async def make_gw(redis_url: str) -> AsyncIterator[Any]:
    @asynccontextmanager
    async def make(cfg: SluiceConfig | None = None, wrap: Any = None) -> AsyncIterator[Gw]:
        cfg = cfg or keyed_config()
        app = create_app(cfg, redis_url)
        side = connect_async(redis_url)
        transport = httpx.ASGITransport(app=wrap(app) if wrap else app)
        try:
            async with app.router.lifespan_context(app):
                async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
                    yield Gw(c, AsyncQueueClient(side, dict(cfg.models)), app.state.gateway, app)
        finally:
            await side.aclose()

    yield make
