"""Pause and resume a model (ADR 0154, under the admin prefix: ADR 0151).

``POST /v1/admin/models/{model}/pause`` body ``{"refuse_submits"?: bool}`` (absent:
the model's ``pause.refuse_submits``) and ``POST /v1/admin/models/{model}/resume``.
The state lives in Redis (``sluice.queue.pause``); each answer says what the model's
state is now, and ``count`` is 1 when the call changed it, 0 when it already was so.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path
from pydantic import BaseModel, ConfigDict

from gateway.admin import AdminCaller, actor, finish, known_model
from gateway.deps import State
from gateway.schemas import errors
from gateway.strict_json import StrictJsonRoute
from sluice.queue.pause import pause_call, resume_call, state_call

router = APIRouter(prefix="/v1/admin", tags=["admin"], route_class=StrictJsonRoute)
ModelName = Annotated[str, Path(description="A model named in the config.", max_length=64)]


class PauseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Refuse new jobs (503 model_paused) while paused; absent: pause.refuse_submits.
    refuse_submits: bool | None = None


@router.post("/models/{model}/pause", responses=errors(401, 403, 404, 413, 415, 422, 503))
async def pause_model(
    st: State,
    key: AdminCaller,
    model: ModelName,
    body: Annotated[PauseRequest | None, Body()] = None,
) -> dict[str, Any]:
    """Pause a model: workers claim nothing (batches in hand finish), the autoscaler
    holds its count, and submits are queued (or refused with ``refuse_submits``)
    until it is resumed. Pausing a paused model updates ``refuse_submits``."""
    known_model(st, model)
    refuse = body.refuse_submits if body and body.refuse_submits is not None else None
    if refuse is None:
        refuse = st.cfg.models[model].pause.refuse_submits
    now_ms = int(time.time() * 1000)
    changed = await st.call(
        st.queue.run(
            pause_call(
                model,
                by=actor(key),
                refuse_submits=refuse,
                now_ms=now_ms,
                partitions=st.queue.ops.parts.span(model),
            )
        )
    )
    state = await st.call(st.queue.run(state_call(model)))
    detail = {"refuse_submits": refuse}
    return await finish(
        st, key, model=model, action="pause", count=int(changed), detail=detail, **state.as_dict()
    )


@router.post("/models/{model}/resume", responses=errors(401, 403, 404, 503))
async def resume_model(st: State, key: AdminCaller, model: ModelName) -> dict[str, Any]:
    """Resume a paused model: its idle workers are woken and claim at once."""
    known_model(st, model)
    buckets = st.cfg.models[model].bucket_names
    span = st.queue.ops.parts.span(model)
    changed = await st.call(st.queue.run(resume_call(model, buckets, span)))
    return await finish(st, key, model=model, action="resume", count=int(changed), paused=False)
