"""Bulk jobs: upload a JSONL file, follow it, fetch its output, cancel it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import StreamingResponse

from gateway import bulk_service
from gateway.deps import Caller, State
from gateway.responses import Json
from gateway.schemas import BulkCancelResult, BulkView, errors
from gateway.webhooks import BULK_EVENTS
from sluice.bulk.lines import MEDIA_TYPES
from sluice.errors import JobConflict

router = APIRouter(prefix="/v1", tags=["bulk"])
ModelName = Annotated[str, Path(description="A model named in the config.", max_length=64)]
BulkId = Annotated[str, Path(description="The id the upload returned.", max_length=256)]
UPLOAD_DOC = {
    "requestBody": {
        "required": True,
        "description": 'JSONL: one JSON object a line, `{"input": ..., "custom_id": "..."}`'
        " (custom_id optional). A bad line fails alone, in the output.",
        # Every media type the upload accepts (x-ndjson first): a client or fuzzer that
        # cannot send one of them (schemathesis has no x-ndjson) can send another.
        "content": {
            t: {"schema": {"type": "string", "format": "binary"}}
            for t in sorted(MEDIA_TYPES, key=lambda t: (t != "application/x-ndjson", t))
        },
    },
}


@router.post(
    "/models/{model}/bulk",
    status_code=202,
    response_class=Json,
    responses={202: {"model": BulkView}, **errors(401, 404, 413, 415, 422, 503)},
    openapi_extra=UPLOAD_DOC,
)
async def submit_bulk(
    model: ModelName,
    request: Request,
    st: State,
    key: Caller,
    webhook_url: Annotated[
        str | None,
        Query(max_length=2048, description="Call this URL when the bulk job ends (signed)."),
    ] = None,
    webhook_events: Annotated[
        str | None,
        Query(
            max_length=64,
            description="Comma-separated: completed, failed, cancelled (default: all).",
        ),
    ] = None,
) -> Json:
    """Run every line of a JSONL file through the model in the headroom left by
    interactive traffic; answers at once with the bulk job (follow GET /v1/bulk/{id})."""
    st.model(model)
    events = [e.strip() for e in webhook_events.split(",")] if webhook_events else None
    hook = await st.webhooks.resolve(webhook_url, events, key, BULK_EVENTS)
    body = await bulk_service.read_upload(request.stream(), st.cfg.bulk.max_file_bytes)
    view = await bulk_service.submit(st, model, body, key.name if key else None, hook)
    return Json(view, status_code=202, headers={"Location": f"/v1/bulk/{view['id']}"})


@router.get(
    "/bulk/{bulk_id}",
    response_class=Json,
    responses={200: {"model": BulkView}, **errors(401, 404, 422, 503)},
)
async def get_bulk(bulk_id: BulkId, st: State, key: Caller) -> Json:
    """State, counts done / failed / total, rate and ETA."""
    rec = await bulk_service.get(st, bulk_id, key.name if key else None)
    return Json(bulk_service.view(rec))


@router.get(
    "/bulk/{bulk_id}/output",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"application/x-ndjson": {}},
            "description": "One line per input line, in input order.",
        },
        **errors(401, 404, 409, 422, 503),
    },
)
async def get_bulk_output(bulk_id: BulkId, st: State, key: Caller) -> StreamingResponse:
    """The output (JSONL): per input line, its ``line`` number, ``custom_id``, ``status``
    and ``result`` or ``error``; 409 until the bulk job has ended."""
    rec = await bulk_service.get(st, bulk_id, key.name if key else None)
    if not rec.ended:
        raise JobConflict(
            f"bulk job {bulk_id!r} is {rec.state} ({rec.done} of {rec.total} lines done); "
            "its output is ready when it has ended",
            rec.state,
        )
    name = f"{bulk_id}.jsonl"
    return StreamingResponse(
        bulk_service.output(st, rec),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.delete(
    "/bulk/{bulk_id}",
    response_model=None,
    responses={200: {"model": BulkCancelResult}, **errors(401, 404, 409, 422, 503)},
)
async def cancel_bulk(bulk_id: BulkId, st: State, key: Caller) -> dict[str, Any]:
    """Stop feeding: lines that have ended keep their output, the rest (queued or
    running) are cancelled; 409 if it had ended."""
    previous = await bulk_service.cancel(st, bulk_id, key.name if key else None)
    state = "cancelling" if previous in ("running", "cancelling") else "cancelled"
    return {"id": bulk_id, "state": state, "previous_state": previous}
