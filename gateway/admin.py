"""What every operator action's route shares (ADR 0151): the admin check for a route
outside the admin prefix, and :func:`finish`, which counts the action in the
metrics, writes it to the audit trail (``sluice.audit``) and builds its answer."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from gateway.auth import caller
from gateway.state import GatewayState
from sluice import audit
from sluice.apikeys import ApiKey
from sluice.errors import Forbidden, UnknownModel


async def _admin_caller(request: Request) -> ApiKey | None:
    """The caller's key; 403 for a key without admin rights. None on an open gateway
    (no keys configured: every route is open there, admin ones included)."""
    key = caller(request.scope)
    if key is not None and not key.admin:
        raise Forbidden("this action needs an admin API key")
    return key


# For routes outside gateway.auth.ADMIN_PREFIXES that still need an admin key
# (POST /v1/jobs/{id}/retry); under the prefix AuthGuard already checked it.
AdminCaller = Annotated[ApiKey | None, Depends(_admin_caller)]


def actor(key: ApiKey | None) -> str:
    """Who acted, for the audit trail: the API key's name, "" on an open gateway."""
    return key.name if key is not None else ""


def known_model(st: GatewayState, model: str) -> None:
    if model not in st.cfg.models:
        raise UnknownModel(f"unknown model {model!r}")


async def finish(
    st: GatewayState,
    key: ApiKey | None,
    *,
    model: str,
    action: str,
    count: int,
    detail: dict[str, Any] | None = None,
    **answer: Any,
) -> dict[str, Any]:
    """Count and audit one action that acted on ``count`` jobs; the route's answer
    ``{"model", "action", "count", **answer}``."""
    st.metrics.count_admin(model, action, count)
    await audit.arecord(
        st.redis, actor=actor(key), action=action, model=model, count=count, detail=detail
    )
    return {"model": model, "action": action, "count": count, **answer}
