"""Models: what is configured, how much is queued, who serves it; predict."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from starlette.types import Scope

from gateway import service
from gateway.auth import caller, header
from gateway.deps import IDEMPOTENCY_DOC, State
from gateway.redis_io import run_reads
from gateway.responses import Json
from gateway.schemas import JobRequest, JobView, ModelList, errors
from gateway.state import GatewayState
from gateway.strict_json import StrictJsonRoute
from sluice.jobs import QueueStats
from sluice.queue.pause import PauseState, state_call
from sluice.registry import WorkerInfo, list_workers_call, workers_by_state

router = APIRouter(prefix="/v1", tags=["models"], route_class=StrictJsonRoute)
PREDICT_MAX_TIMEOUT_S = 60  # ?timeout= bound (gateway.lean reads the same)
ModelName = Annotated[str, Path(description="A model named in the config.", max_length=64)]


# OpenAI's model objects carry a creation time; a configured model has none of its
# own, so it is when this process loaded the config (imported its routes).
LOADED_AT_S = int(time.time())


def _model_info(
    st: Any, name: str, stats: QueueStats, workers: list[WorkerInfo], pause: PauseState
) -> dict[str, Any]:
    cfg = st.cfg.models[name]
    return {
        "id": name,
        "object": "model",
        "created": LOADED_AT_S,
        "owned_by": "sluice",
        "name": name,
        "handler": cfg.handler,
        "buckets": [
            {
                "bucket": b.bucket,
                "bound": int(b.bucket),
                "queued": b.queued,
                "queued_cost": b.queued_cost,
            }
            for b in stats.buckets
        ],
        "queued": stats.queued,
        "queued_cost": stats.queued_cost,
        "in_flight": stats.in_flight,
        "workers": workers_by_state(workers),
        "scales_from_zero": cfg.autoscaling.min_replicas == 0,
        "paused": pause.paused,
        "pause": pause.as_dict() if pause.paused else None,
    }


@router.get(
    "/models", response_model=None, responses={200: {"model": ModelList}, **errors(401, 503)}
)
async def list_models(st: State) -> dict[str, Any]:
    """Every model in OpenAI's list shape, each with its buckets, queue depth and cost
    per bucket, workers by state, and whether an operator paused it (``paused``,
    ``pause``: since when, by whom, whether it refuses submits)."""
    calls: list[Any] = []
    for name in st.cfg.models:
        calls += [st.queue.ops.stats(name), list_workers_call(name), state_call(name)]
    replies = await st.call(run_reads(st.redis, calls))
    models = [
        _model_info(st, name, replies[3 * i], replies[3 * i + 1][0], replies[3 * i + 2])
        for i, name in enumerate(st.cfg.models)
    ]
    return {"object": "list", "data": models}


@router.post(
    "/models/{model}/predict",
    response_class=Json,
    responses={
        200: {"model": JobView},
        202: {"model": JobView},
        **errors(401, 403, 404, 413, 415, 422, 429, 503),
    },
    openapi_extra=IDEMPOTENCY_DOC,
)
async def predict(
    model: ModelName,
    body: JobRequest,
    request: Request,
    timeout: Annotated[
        float | None,
        Query(
            gt=0,
            le=PREDICT_MAX_TIMEOUT_S,
            allow_inf_nan=False,
            description="Wait at most this long (s).",
        ),
    ] = None,
) -> Json:
    """Submit and wait: 200 with the ended job, or 202 with the job to keep polling."""
    return await predict_answer(request.app.state.gateway, request.scope, model, body, timeout)


async def predict_answer(
    st: GatewayState, scope: Scope, model: str, body: JobRequest, timeout: float | None
) -> Json:
    """What ``predict`` answers, from the parsed request: the FastAPI route and the
    lean path (gateway.lean) both call it, so they answer alike."""
    key = caller(scope)
    idempotency_key = header(scope, b"idempotency-key")
    owner = key.owner if key else None
    hook = None  # for a job that outlasts the wait: the body's webhook, else the key's
    if body.webhook is not None or (key is not None and key.webhook_url):
        hook = await st.webhooks.for_spec(body.webhook, key)
    digest = service.request_hash(body) if idempotency_key is not None else ""
    spec = service.Spec(
        body.priority, body.deadline_ms, body.metadata, idempotency_key, owner, hook, digest
    )
    views, _ = await service.submit(st, model, [body.input], spec)
    job_id = views[0]["id"]
    limit = min(timeout or st.gw.predict_timeout_s, st.gw.predict_timeout_s)
    rec = await service.wait(st, job_id, limit, owner.name if owner else None)
    headers = {"Location": f"/v1/jobs/{job_id}"}
    return Json(
        service.job_view(rec), status_code=200 if rec.status.terminal else 202, headers=headers
    )
