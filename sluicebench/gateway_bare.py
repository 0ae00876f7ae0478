"""The benchmark's baseline: a bare FastAPI endpoint doing one Redis round trip.

Same server stack as the gateway (uvicorn, uvloop, httptools, a pydantic body),
none of the gateway's work (estimation, admission, the submit script, metrics).
"""

from __future__ import annotations

import os
from typing import Any

import redis.asyncio as aioredis
from fastapi import FastAPI
from pydantic import BaseModel

from sluice import keys

BARE_URL_ENV = "SLUICE_BENCH_BARE_REDIS_URL"


class Body(BaseModel):
    input: Any


def create_bare_app() -> FastAPI:
    r = aioredis.Redis.from_url(os.environ[BARE_URL_ENV], decode_responses=True)
    app = FastAPI()

    @app.post("/bare", status_code=202)
    async def bare(body: Body) -> dict[str, Any]:
        n = await r.incr(keys.bench_key("bare"))
        return {"id": str(n), "status": "queued"}

    return app
