"""Admin: a model's dead letters (list, read, redrive, purge), purging its queue, and
retrying one failed job (docs/adr/0151, docs/adr/0153).

Every action goes through ``sluice.admin.ops`` (chunks of 500 ids a script call),
is counted in ``sluice_admin_*_total`` and written to the audit trail with the
caller's API key name (``gateway.admin.finish``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.admin import AdminCaller, finish
from gateway.deps import Caller, State
from gateway.schemas import errors
from gateway.state import GatewayState
from gateway.strict_json import StrictJsonRoute
from sluice.admin import ops
from sluice.queue.scripts import Call

router = APIRouter(tags=["admin"], route_class=StrictJsonRoute)
PREFIX = "/v1/admin/models/{model}"
ModelName = Annotated[str, Path(description="A model named in the config.", max_length=64)]
JobId = Annotated[str, Path(description="The job's id.", max_length=256)]
MAX_IDS = 10_000  # the dead-letter list's own cap


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeadLetterFilterBody(_Body):
    """Every field given must match; a dead letter's error type is its error's ``type``."""

    error_type: str | None = Field(None, max_length=200)
    last_worker: str | None = Field(None, max_length=200)
    bucket: str | None = Field(None, max_length=20)
    priority: Literal["high", "normal", "low", "bulk"] | None = None
    owner: str | None = Field(None, max_length=200)
    failed_after_ms: int | None = Field(None, ge=0)
    failed_before_ms: int | None = Field(None, ge=0)


class DeadLetterSelection(_Body):
    """``{"ids": [...]}`` these, ``{"filter": {...}}`` those that match, ``{}`` all."""

    ids: list[Annotated[str, Field(max_length=256)]] | None = Field(
        None, min_length=1, max_length=MAX_IDS
    )
    filter: DeadLetterFilterBody | None = None

    @model_validator(mode="after")
    def _one(self) -> DeadLetterSelection:
        if self.ids is not None and self.filter is not None:
            raise ValueError("give ids or a filter, not both")
        return self


class QueuePurge(_Body):
    """Which queued jobs to cancel: one priority class and/or one bucket; {} all."""

    priority: Literal["high", "normal", "low", "bulk"] | None = None
    bucket: str | None = Field(None, max_length=20)


class ActionDone(BaseModel):
    model: str
    action: str
    count: int = Field(..., description="Jobs acted on.")
    ids: list[str] | None = None


async def _drive(st: GatewayState, plan: ops.Plan[Any]) -> Any:
    st.queue.register(ops.scripts())  # once per client: a dict lookup after that

    def run(call: Call[Any]) -> Any:
        return st.call(st.queue.run(call))

    return await ops.adrive(plan, run)


@router.get(f"{PREFIX}/dead-letters", responses=errors(401, 403, 404, 422, 503))
async def list_dead_letters(
    model: ModelName,
    st: State,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=300)] = None,
) -> dict[str, Any]:
    """The model's dead letters, newest first, with why each failed; pass
    ``next_cursor`` back as ``cursor`` for the next page (null: the last)."""
    st.model(model)
    page = await _drive(st, ops.page(model, limit, cursor, st.queue.ops.parts.span(model)))
    return {
        "model": model,
        "total": page.total,
        "items": [d.to_dict() for d in page.items],
        "next_cursor": page.next_cursor,
    }


@router.get(f"{PREFIX}/dead-letters/{{job_id}}", responses=errors(401, 403, 404, 503))
async def get_dead_letter(model: ModelName, job_id: JobId, st: State) -> dict[str, Any]:
    """One dead letter: its error, attempts, last worker, and when it was queued,
    started and failed."""
    st.model(model)
    d = await _drive(st, ops.one(job_id, model))
    return dict(d.to_dict())


async def _dead_letters(
    st: GatewayState, key: Any, model: str, action: str, body: DeadLetterSelection
) -> dict[str, Any]:
    st.model(model)
    detail: dict[str, Any]
    if body.ids is not None:
        ids, detail = list(dict.fromkeys(body.ids)), {"ids": len(body.ids)}
    else:
        where = ops.DeadLetterFilter(**body.filter.model_dump()) if body.filter else None
        ids = await _drive(st, ops.select(model, where, st.queue.ops.parts.span(model)))
        detail = {"filter": body.filter.model_dump(exclude_none=True) if body.filter else "all"}
    done = await _drive(st, ops.act(model, action, ids))
    return await finish(
        st, key, model=model, action=f"dead_letters.{action}", count=len(done), detail=detail,
        ids=done,
    )  # fmt: skip


ACTION_ERRORS = errors(401, 403, 404, 413, 415, 422, 503)


@router.post(f"{PREFIX}/dead-letters/redrive", response_model=ActionDone, responses=ACTION_ERRORS)
async def redrive(
    model: ModelName, body: DeadLetterSelection, st: State, key: Caller
) -> dict[str, Any]:
    """Put dead letters back in their queue, in their original place, attempts reset,
    with the same ids: whoever waits on one (long-poll, stream, webhook) sees it end."""
    return await _dead_letters(st, key, model, "redrive", body)


@router.post(f"{PREFIX}/dead-letters/purge", response_model=ActionDone, responses=ACTION_ERRORS)
async def purge_dead_letters(
    model: ModelName, body: DeadLetterSelection, st: State, key: Caller
) -> dict[str, Any]:
    """Delete dead letters (they ended as failed already)."""
    return await _dead_letters(st, key, model, "purge", body)


@router.post(f"{PREFIX}/queue/purge", response_model=ActionDone, responses=ACTION_ERRORS)
async def purge_queue(model: ModelName, body: QueuePurge, st: State, key: Caller) -> dict[str, Any]:
    """Cancel the model's queued jobs (one priority class and/or bucket, or all; those
    waiting out a retry backoff too); each ends ``cancelled`` for whoever waits on it.
    Jobs submitted while it runs are kept; running jobs finish."""
    cfg = st.model(model)
    span = st.queue.ops.parts.span(model)
    n = await _drive(st, ops.purge_queue(model, cfg, body.priority, body.bucket, span))
    detail = body.model_dump(exclude_none=True)
    return await finish(st, key, model=model, action="queue.purge", count=n, detail=detail)


@router.post(
    "/v1/jobs/{job_id}/retry", response_model=ActionDone, responses=errors(401, 403, 404, 409, 503)
)
async def retry_job(job_id: JobId, st: State, key: AdminCaller) -> dict[str, Any]:
    """Retry one failed job now (admin key): back in its queue with the same id,
    attempts reset. 409 unless it failed."""
    model = await _drive(st, ops.retry(job_id, dict(st.cfg.models)))
    return await finish(
        st, key, model=model, action="retry", count=1, detail={"id": job_id}, ids=[job_id]
    )
