"""Annotated dependency aliases shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from gateway.auth import caller
from gateway.state import GatewayState
from sluice.apikeys import ApiKey


async def _state(request: Request) -> GatewayState:
    st: GatewayState = request.app.state.gateway
    return st


async def _caller(request: Request) -> ApiKey | None:
    return caller(request.scope)


State = Annotated[GatewayState, Depends(_state)]
# The API key of the request (None on an open gateway); set by gateway.auth.AuthGuard.
Caller = Annotated[ApiKey | None, Depends(_caller)]
IdempotencyKey = Annotated[
    str | None,
    Header(alias="Idempotency-Key", description="A replay with the same key returns the same job."),
]

# The same header documented for a route that reads it from the request itself.
IDEMPOTENCY_DOC = {
    "parameters": [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "description": "A replay with the same key returns the same job.",
            "schema": {"type": "string", "maxLength": 200},
        }
    ],
}
