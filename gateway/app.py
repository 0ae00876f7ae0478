"""The gateway's FastAPI app: ``create_app(config)``, or ``app_from_env()`` for uvicorn."""

from __future__ import annotations

import gc
import inspect
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as aioredis
from fastapi import FastAPI

from gateway import dashboard, errors
from gateway.auth import AuthGuard, needs_key
from gateway.front import GatewayApp, HotFront
from gateway.lean import LeanRoutes
from gateway.middleware import BodyGuard, Metrics
from gateway.routers import (
    audit,
    bulk,
    dead_letters,
    embeddings,
    events,
    generate,
    health,
    jobs,
    models,
    pause,
    stream,
    webhooks,
)
from gateway.state import GatewayState
from sluice.apikeys import KeyRing, load_keyring
from sluice.config import CONFIG_ENV, REDIS_URL_ENV, SluiceConfig, load_config, resolve_redis_url
from sluice.errors import ConfigError

# FastAPI's own OpenTelemetry (FastAPI >= 0.16x turns it on by itself once a global
# provider exists) is off: Sluice's metrics are Prometheus', the lean routes
# (gateway.lean, ADR 0162) would not emit it, and checking for providers costs
# three environment lookups on every request.
NATIVE_TELEMETRY_OFF: dict[str, Any] = (
    {
        "telemetry": {
            "tracing": False,
            "metrics": False,
            "logs": False,
            "operation_spans": False,
        }
    }
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)
GC_FREEZE_ENV = "SLUICE_GATEWAY_GC_FREEZE"  # "0" turns the start-up freeze off
# The youngest generation's collection threshold under load (ADR 0176): Python's 700
# made a collection every ~90 predicts, each scanning every in-flight request's young
# objects (a 384-float result is one list of 384 items): ~2% of a predict's CPU.
GC_GEN0_THRESHOLD = 10_000
API_DESCRIPTION = """Submit inference jobs, poll or long-poll for results.

Every error answers `{"error": {"type", "message"}}`; 429 and 503 carry `Retry-After`.
When API keys are configured, send `Authorization: Bearer <key>` (or `X-API-Key`).
"""

ROUTERS = (
    jobs.router,
    events.router,
    stream.router,
    generate.router,
    bulk.router,
    models.router,
    embeddings.router,
    webhooks.router,
    health.router,
    audit.router,
    pause.router,
    dead_letters.router,
    dashboard.router,
)


def create_app(
    cfg: SluiceConfig,
    redis_url: str | None = None,
    *,
    redis: aioredis.Redis | None = None,
    pubsub_redis: aioredis.Redis | None = None,
    keyring: KeyRing | None = None,
    lean: bool = True,
) -> FastAPI:
    """The app for one config; pass ``redis`` (and ``pubsub_redis``) to inject clients.

    API keys come from ``cfg.auth`` (its secret file and env var are read here)
    unless ``keyring`` is given. ``lean=False`` serves the hot routes through
    FastAPI's router too (gateway.lean; tests compare the two).
    """
    keyring = load_keyring(cfg.auth) if keyring is None else keyring
    state = GatewayState(cfg, redis_url, redis=redis, pubsub_redis=pubsub_redis)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await state.start()
        try:
            yield
        finally:
            await state.stop()

    app = GatewayApp(
        title="Sluice",
        version="0.1.0",
        description=API_DESCRIPTION,
        lifespan=lifespan,
        **NATIVE_TELEMETRY_OFF,
    )
    app.state.gateway = state
    _document_model_names(app, sorted(cfg.models))
    for r in ROUTERS:
        app.include_router(r)
    errors.install(app)
    if lean:  # innermost of ours: the guards and metrics below see every request
        app.add_middleware(LeanRoutes, api=app)
    # Outermost first at request time: metrics see every answer, including 413/415.
    app.add_middleware(
        BodyGuard, max_bytes=cfg.gateway.max_body_bytes, bulk_max_bytes=cfg.bulk.max_file_bytes
    )
    if keyring:  # an open gateway pays nothing for access control
        app.add_middleware(AuthGuard, keyring=keyring)  # before a body is read
    app.add_middleware(Metrics, metrics=state.metrics)
    if lean:  # the lean path's plain requests, ahead of the whole stack (ADR 0174)
        metrics = Metrics(app, metrics=state.metrics)
        app.front = HotFront(app, metrics, cfg.gateway.max_body_bytes, keyring or None)
    if keyring:
        _document_auth(app)
    return app


def _document_auth(app: FastAPI) -> None:
    """With keys configured, the schema says every /v1 operation needs one."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            }
            for path, item in schema.get("paths", {}).items():
                if needs_key(path):
                    for op in item.values():
                        op["security"] = [{"bearer": []}, {"apiKey": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _document_model_names(app: FastAPI, names: list[str]) -> None:
    """The OpenAPI schema lists the configured models as the ``{model}`` values."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            for item in schema.get("paths", {}).values():
                for op in item.values():
                    for p in op.get("parameters", []):
                        if p.get("in") == "path" and p.get("name") == "model":
                            p["schema"] = {**p.get("schema", {}), "enum": names}
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def app_from_env() -> FastAPI:
    """uvicorn factory: the config from $SLUICE_CONFIG, Redis from $SLUICE_REDIS_URL."""
    path = os.environ.get(CONFIG_ENV)
    if not path:
        raise ConfigError(f"no config file: set {CONFIG_ENV}")
    cfg = load_config(path)
    app = create_app(cfg, resolve_redis_url(os.environ.get(REDIS_URL_ENV), cfg))
    if os.environ.get(GC_FREEZE_ENV, "1") != "0":
        # The app, pydantic schemas and tokenizer are ~80k long-lived objects: a full
        # collection scanning them stalls the event loop ~37 ms (measured), which
        # lands in the latency tail. Frozen, they are never scanned again.
        gc.collect()
        gc.freeze()
        gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])
    return app
