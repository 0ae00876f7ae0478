"""``GET /v1/admin/audit``: the operator actions' audit trail, newest first."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from gateway.deps import State
from gateway.schemas import errors
from sluice import audit

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.get("/audit", responses=errors(401, 403))
async def read_audit(
    st: State,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    model: Annotated[str | None, Query(max_length=64)] = None,
) -> dict[str, Any]:
    """The newest operator actions: who (API key name), what, on which model, how many."""
    entries = await audit.aread(st.redis, limit=limit, model=model)
    return {"entries": [e.to_dict() for e in entries]}
