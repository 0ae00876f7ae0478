"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.deps import State

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive (no dependency checked)."""
    return {"status": "ok"}


@router.get("/readyz", response_model=None)
async def readyz(st: State) -> Any:
    """Ready when the config is loaded and Redis answers (and completions are subscribed)."""
    redis_ok = await st.ping()
    subscribed = st.completions.connected.is_set()
    body = {
        "status": "ready" if redis_ok and subscribed else "not_ready",
        "redis": redis_ok, "completions_subscribed": subscribed,
        "models": sorted(st.cfg.models),
    }  # fmt: skip
    if redis_ok and subscribed:
        return body
    return JSONResponse(
        {"error": {"type": "not_ready", "message": "Redis is not answering"}, **body},
        status_code=503, headers={"Retry-After": "1"},
    )  # fmt: skip


@router.get("/metrics", response_class=Response)
async def metrics(st: State) -> Response:
    """Prometheus text format; gauges come from the background snapshot, not from Redis."""
    st.metrics.waiters.set(st.completions.waiting)
    return Response(st.metrics.render(), media_type=CONTENT_TYPE_LATEST)
