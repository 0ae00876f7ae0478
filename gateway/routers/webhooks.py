"""Admin: webhook deliveries, their dead-letter list, and redelivery."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from gateway.deps import State
from gateway.redis_io import run_reads
from gateway.responses import Json
from gateway.schemas import Redelivery, errors
from sluice.errors import JobNotFound

router = APIRouter(prefix="/v1/admin/webhooks", tags=["admin"])
DeliveryId = Annotated[
    str, Path(description="The job's (or bulk job's) id; webhook-id is msg_<id>.", max_length=256)
]


def _public(delivery_id: str, view: Any) -> dict[str, Any]:
    return {"id": delivery_id, "webhook_id": f"msg_{delivery_id}", "url": view.url} | (
        view.public() | {"log": view.log}
    )


@router.get("/{delivery_id}", response_model=None, responses=errors(401, 403, 404, 503))
async def get_delivery(delivery_id: DeliveryId, st: State) -> dict[str, Any]:
    """One delivery with its attempts (status, latency, error of each, newest last)."""
    view = await st.call(st.queue.run(st.deliveries.view(delivery_id)))
    if view is None:
        raise JobNotFound(f"no webhook delivery for {delivery_id!r}")
    return _public(delivery_id, view)


@router.get("", response_model=None, responses=errors(401, 403, 404, 422, 503))
async def dead_deliveries(
    st: State,
    model: Annotated[str, Query(max_length=64, description="A model named in the config.")],
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """The model's given-up deliveries, newest first (redeliver any of them)."""
    st.model(model)
    ids = await st.call(st.queue.run(st.deliveries.dead(model, limit)))
    views = await st.call(run_reads(st.redis, [st.deliveries.view(i) for i in ids])) if ids else []
    return {
        "model": model,
        "dead": [_public(i, v) for i, v in zip(ids, views, strict=True) if v is not None],
    }


@router.post(
    "/{delivery_id}/redeliver",
    status_code=202,
    response_class=Json,
    responses={202: {"model": Redelivery}, **errors(401, 403, 404, 503)},
)
async def redeliver(delivery_id: DeliveryId, st: State) -> Json:
    """Send it again now, with the same webhook-id and body, and a fresh round of retries."""
    previous = await st.call(
        st.queue.run(st.deliveries.redeliver(delivery_id, st.cfg.webhooks.record_ttl_s))
    )
    return Json(
        {"id": delivery_id, "state": "pending", "previous_state": previous}, status_code=202
    )
