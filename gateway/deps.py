"""Annotated dependency aliases shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from gateway.state import GatewayState


async def _state(request: Request) -> GatewayState:
    st: GatewayState = request.app.state.gateway
    return st


State = Annotated[GatewayState, Depends(_state)]
IdempotencyKey = Annotated[
    str | None,
    Header(alias="Idempotency-Key", description="A replay with the same key returns the same job."),
]

# The same header documented for a route that reads it from the request itself.
IDEMPOTENCY_DOC = {
    "parameters": [{
        "name": "Idempotency-Key", "in": "header", "required": False,
        "description": "A replay with the same key returns the same job.",
        "schema": {"type": "string", "maxLength": 200},
    }],
}  # fmt: skip
