"""Jobs: submit one or a batch, read (and long-poll), cancel."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from starlette.types import Scope

from gateway import service
from gateway.auth import caller, header, owner_name
from gateway.deps import IDEMPOTENCY_DOC, Caller, IdempotencyKey, State
from gateway.responses import Json
from gateway.schemas import (
    BatchAccepted,
    BatchRequest,
    CancelResult,
    JobAccepted,
    JobRequest,
    JobView,
    errors,
)
from gateway.state import GatewayState
from gateway.strict_json import StrictJsonRoute
from sluice.errors import InvalidInput

router = APIRouter(prefix="/v1", tags=["jobs"], route_class=StrictJsonRoute)
ModelName = Annotated[str, Path(description="A model named in the config.", max_length=64)]
MAX_JOB_ID = 256
JobId = Annotated[str, Path(description="The opaque id a submit returned.", max_length=MAX_JOB_ID)]
MAX_WAIT_S = 60  # ?wait='s bound on GET /v1/jobs/{job_id}


@router.post(
    "/models/{model}/jobs",
    status_code=202,
    response_class=Json,
    responses={202: {"model": JobAccepted}, **errors(401, 403, 404, 413, 415, 422, 429, 503)},
    openapi_extra=IDEMPOTENCY_DOC,
)
async def submit_job(model: ModelName, body: JobRequest, request: Request) -> Json:
    """Queue one job; answers at once with its id (poll or long-poll GET /v1/jobs/{id})."""
    return await submit_answer(request.app.state.gateway, request.scope, model, body)


async def submit_answer(st: GatewayState, scope: Scope, model: str, body: JobRequest) -> Json:
    """What ``submit_job`` answers, from the parsed request: the FastAPI route and the
    lean path (gateway.lean) both call it, so they answer alike."""
    key = header(scope, b"idempotency-key")
    api_key = caller(scope)
    owner = api_key.owner if api_key is not None else None
    hook = None
    if body.webhook is not None or (api_key is not None and api_key.webhook_url):
        hook = await st.webhooks.for_spec(body.webhook, api_key)
    digest = service.request_hash(body) if key is not None else ""
    spec = service.Spec(body.priority, body.deadline_ms, body.metadata, key, owner, hook, digest)
    views, replayed = await service.submit(st, model, [body.input], spec)
    headers = {"Location": f"/v1/jobs/{views[0]['id']}"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return Json(views[0], status_code=202, headers=headers)


@router.post(
    "/models/{model}/jobs/batch",
    status_code=202,
    response_model=None,
    responses={202: {"model": BatchAccepted}, **errors(401, 403, 404, 413, 415, 422, 429, 503)},
)
async def submit_batch(
    model: ModelName,
    body: BatchRequest,
    st: State,
    key: Caller,
    idempotency_key: IdempotencyKey = None,
) -> Json:
    """Queue many jobs in one Redis round trip (all or none); ids in input order."""
    # Answered as a Json response, as a single submit is: a returned dict would go
    # through FastAPI's jsonable_encoder item by item over every job view (16% of the
    # gateway's CPU on this route in `sluice bench cost`).
    if len(body.inputs) > st.gw.max_batch_inputs:
        raise InvalidInput(
            f"inputs: {len(body.inputs)} items, the limit is {st.gw.max_batch_inputs}"
        )
    owner = key.owner if key else None
    hook = await st.webhooks.for_spec(body.webhook, key)
    digest = service.request_hash(body) if idempotency_key is not None else ""
    spec = service.Spec(
        body.priority, body.deadline_ms, body.metadata, idempotency_key, owner, hook, digest
    )
    views, replayed = await service.submit(st, model, list(body.inputs), spec, batch=True)
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return Json({"jobs": views}, status_code=202, headers=headers)


@router.get(
    "/jobs/{job_id}",
    response_class=Json,
    responses={200: {"model": JobView}, **errors(401, 404, 422, 503)},
)
async def get_job(
    job_id: JobId,
    st: State,
    request: Request,
    wait: Annotated[
        float,
        Query(ge=0, le=MAX_WAIT_S, allow_inf_nan=False, description="Long-poll up to S seconds."),
    ] = 0,
) -> Json:
    """A job's status, result or error, and timings; ``?wait=S`` answers as soon as it ends."""
    return await job_answer(st, request.scope, job_id, wait)


async def job_answer(st: GatewayState, scope: Scope, job_id: str, wait: float) -> Json:
    """What ``get_job`` answers, from the parsed request: the FastAPI route and the
    lean path (gateway.lean, ADR 0178) both call it. The owner is the caller's key's
    name (None on an open gateway): another key's job is not found."""
    owner = owner_name(scope)
    rec = await (
        service.wait(st, job_id, wait, owner) if wait > 0 else service.get(st, job_id, owner)
    )
    return Json(service.job_view(rec))


@router.delete(
    "/jobs/{job_id}",
    response_model=None,
    responses={200: {"model": CancelResult}, **errors(401, 404, 409, 503)},
)
async def cancel_job(job_id: JobId, st: State, key: Caller) -> dict[str, Any]:
    """Cancel a queued job; a running job is marked, its worker stops it at its next
    check and its result is discarded (ADR 0154); 409 if it ended."""
    previous = await service.cancel(st, job_id, key.name if key else None)
    return {"id": job_id, "status": "cancelled", "previous_status": previous}
