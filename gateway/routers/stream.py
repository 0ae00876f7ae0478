"""``GET /v1/jobs/{id}/stream``: a generative job's tokens as Server-Sent Events.

Each event is one entry of the job's Redis Stream (ADR 0144, 0148): ``id:`` is
the entry id, ``event:`` its type, ``data:`` JSON:

- ``start`` / ``restart``: ``{"attempt"}``: a run began (a restart: a worker died
  or the lease expired and the job runs again; its tokens start again at 0).
- ``tokens``: ``{"attempt", "index", "token_ids", "text"}``: ``index`` is the
  first token's offset in the output.
- ``end``: ``{"attempt", "result"}``: the whole output (as GET /v1/jobs/{id}).
- ``error``: ``{"attempt", "error"}``: failed, expired or cancelled.

The stream ends after ``end`` or ``error``. It resumes after ``Last-Event-ID``
(sent by EventSource on reconnect) or ``?after=<id>``; a resume after the final
event answers 204, which tells EventSource to stop. An ending made from the job
record (a job that never ran: cancelled or expired in the queue) has the id
``end``. Comment lines keep an idle stream open. A job of a model without a
``generate:`` section has no token stream: 422.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Response
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway import service
from gateway.deps import Caller, State
from gateway.routers.events import RETRY_MS, SSE_DOC, SSE_HEADERS, stream_id_ok
from gateway.schemas import errors
from gateway.state import GatewayState
from gateway.token_hub import Entry, Listener, is_final
from gateway.token_stream import job_entries
from sluice import fastjson, keys
from sluice.errors import InvalidInput, SluiceError
from sluice.jobs import JobRecord
from sluice.records import StreamField

router = APIRouter(prefix="/v1", tags=["generate"])
JobId = Annotated[str, Path(description="The opaque id a submit returned.", max_length=256)]
ENDED_ID = "end"  # the SSE id of an ending made from the job record
LastEventId = Annotated[
    str | None,
    Header(alias="Last-Event-ID", max_length=64, description="Resume after this event."),
]
After = Annotated[
    str | None,
    Query(max_length=64, description="Resume after this event id (as Last-Event-ID)."),
]


def _json_field(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def entry_data(fields: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """An entry's SSE event name and data."""
    kind = fields.get(StreamField.TYPE, "")
    data: dict[str, Any] = {"attempt": int(fields.get(StreamField.ATTEMPT) or 1)}
    if kind == "tokens":
        data["index"] = int(fields.get(StreamField.INDEX) or 0)
        data["token_ids"] = _json_field(fields.get(StreamField.IDS)) or []
        data["text"] = fields.get(StreamField.TEXT, "")
    elif kind == "end":
        data["result"] = _json_field(fields.get(StreamField.RESULT))
    elif kind == "error":
        error = _json_field(fields.get(StreamField.ERROR))
        data["error"] = error if isinstance(error, dict) else {"message": str(error)}
    return kind, data


def sse_entry(entry: Entry) -> bytes:
    entry_id, fields = entry
    kind, data = entry_data(fields)
    eid = entry_id or ENDED_ID
    return f"id: {eid}\nevent: {kind}\ndata: {fastjson.dumps(data)}\n\n".encode()


async def _events(
    st: GatewayState, listener: Listener, rec: JobRecord, after: str, owner: str | None
) -> AsyncIterator[bytes]:
    yield f"retry: {RETRY_MS}\n\n".encode()
    try:
        async for batch in job_entries(st, listener, rec, after, owner):
            if not batch:
                yield b": keep-alive\n\n"
            for entry in batch:
                yield sse_entry(entry)
    except SluiceError:  # Redis unavailable, shutting down, the job gone
        return  # the client reconnects and resumes from its last id


class ListenerResponse(StreamingResponse):
    """A token stream that leaves the hub however it ends (finished, client gone,
    or cut before its body started)."""

    def __init__(self, st: GatewayState, body: AsyncIterator[bytes], listener: Listener) -> None:
        super().__init__(body, media_type="text/event-stream", headers=SSE_HEADERS)
        self.hub, self.listener = st.tokens, listener

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.hub.leave(self.listener)


def resume_point(last_event_id: str | None, after: str | None) -> str | None:
    """The id to resume after ('0-0': from the start), None once all was seen."""
    value = last_event_id or after
    if not value:
        return "0-0"
    if value == ENDED_ID:
        return None
    if not stream_id_ok(value):
        raise InvalidInput("Last-Event-ID / after: not an event id of this stream (<ms>-<seq>)")
    return value


async def generative_job(st: GatewayState, job_id: str, owner: str | None) -> JobRecord:
    """The job (404 when unknown or another key's), 422 unless its model generates."""
    rec = await service.get(st, job_id, owner)
    if not st.model(rec.model).generative:
        raise InvalidInput(
            f"job {job_id!r} is of model {rec.model!r}, which has no token stream (no "
            "generate: section); read it with GET /v1/jobs/{id} or /v1/jobs/{id}/events"
        )
    return rec


async def _seen_final(st: GatewayState, rec: JobRecord, after: str) -> bool:
    if after == "0-0":
        return False
    stream = keys.stream_key(rec.model, rec.id)
    page: Any = await st.call(st.redis.xrange(stream, min=after, max=after, count=1))
    return bool(page) and is_final((page[0][0], dict(page[0][1])))


@router.get(
    "/jobs/{job_id}/stream",
    response_class=StreamingResponse,
    responses={**SSE_DOC, **errors(401, 404, 422, 429, 503)},
)
async def job_stream(
    job_id: JobId,
    st: State,
    key: Caller,
    last_event_id: LastEventId = None,
    after: After = None,
) -> Response:
    """A generative job's tokens as they are made (SSE), resumable; see the events."""
    start = resume_point(last_event_id, after)
    owner = key.name if key else None
    rec = await generative_job(st, job_id, owner)
    if start is None or await _seen_final(st, rec, start):
        return Response(status_code=204)  # all seen: EventSource stops reconnecting
    listener = st.tokens.join(rec.model, job_id)  # 429 past the cap, 503 when closing
    return ListenerResponse(st, _events(st, listener, rec, start, owner), listener)
