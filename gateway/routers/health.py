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
    """Ready when the config is loaded, Redis answers (and completions are subscribed),
    every generative model's prompt codec loaded, and the process is not shutting down."""
    closing = st.waiters.closing
    redis_ok = False if closing else await st.ping()
    subscribed = st.waiters.connected.is_set()
    unavailable = dict(sorted(st.codecs.failed.items()))
    ok = redis_ok and subscribed and not closing and not unavailable
    body = {
        "status": "ready" if ok else "not_ready",
        "redis": redis_ok,
        "completions_subscribed": subscribed,
        "shutting_down": closing,
        "models": sorted(st.cfg.models),
        "models_unavailable": unavailable,
    }
    if ok:
        return body
    if closing:
        why = "shutting down"
    elif not redis_ok or not subscribed:
        why = "Redis is not answering"
    else:
        why = "; ".join(
            f"model {m!r}: its prompt codec did not load ({r})" for m, r in unavailable.items()
        )
    return JSONResponse(
        {"error": {"type": "not_ready", "message": why}, **body},
        status_code=503,
        headers={"Retry-After": "1"},
    )


@router.get("/metrics", response_class=Response)
async def metrics(st: State) -> Response:
    """Prometheus text format; gauges come from the background snapshot, not from Redis."""
    st.metrics.waiters.set(st.waiters.waiting)
    return Response(st.metrics.render(), media_type=CONTENT_TYPE_LATEST)
