"""Server-Sent Events: a job's status changes and result, and a model's ended jobs.

For browsers and dashboards that cannot receive webhooks. Both streams resume
with ``Last-Event-ID`` (which EventSource sends on its own when it reconnects):

- ``GET /v1/jobs/{id}/events``: ``status`` events as the job moves (queued,
  running, again after a retry, its end), then one ``result`` event with the job
  as GET /v1/jobs/{id} answers it, and the stream ends. Event ids grow with each
  change (``2 x attempts`` queued, ``2 x attempts - 1`` running, then END_STATUS
  and END_RESULT), so a resumed stream sends only what the client has not seen,
  and a reconnect after the result gets 204 (EventSource stops reconnecting).
- ``GET /v1/models/{m}/events`` (admin key): one ``ended`` event per entry of the
  model's event streams (the jobs one script call ended, with their statuses), of
  every partition (``queue.partitions``); its id is the stream's cursor: the Redis
  stream id of the last entry sent of each partition, comma-separated in partition
  order (one partition: the plain stream id). Without Last-Event-ID it starts from
  now; a single stream id (from before partitions) resumes partition 0 after it and
  the others from its millisecond. Every stream of a model is fed by shared readers
  (gateway.event_hub); past ``gateway.model_events_max_viewers`` open streams a new
  one is a 429.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Response
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway import service
from gateway.deps import Caller, State
from gateway.event_hub import MAX_CURSOR_CHARS, Viewer, parse_cursor
from gateway.schemas import errors
from gateway.state import GatewayState
from sluice import fastjson
from sluice.errors import Forbidden, InvalidInput, JobNotFound, RedisUnavailable, ShuttingDown
from sluice.jobs import JobRecord, JobStatus

router = APIRouter(prefix="/v1", tags=["events"])
JobId = Annotated[str, Path(description="The opaque id a submit returned.", max_length=256)]
ModelName = Annotated[str, Path(description="A model named in the config.", max_length=64)]
LastEventId = Annotated[
    str | None,
    Header(alias="Last-Event-ID", max_length=64, description="Resume after this event."),
]
ModelLastEventId = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID",
        max_length=MAX_CURSOR_CHARS,
        description="Resume after this event: its id (a stream id per partition).",
    ),
]
END_STATUS = 1_000_000  # the id of a job's terminal status event
END_RESULT = END_STATUS + 1
POLL_S = 0.5  # a job's queued -> running change is read this often (its end wakes at once)
KEEPALIVE_S = 15.0  # a job stream's; a model stream's is the hub's
RETRY_MS = 1000  # what EventSource waits before it reconnects
STREAM_ID_RE = re.compile(r"^\d{1,20}-\d{1,20}$")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
SSE_DOC: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events."}
}


def sse(event: str, data: Any, event_id: str | int | None = None) -> bytes:
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append(f"event: {event}")
    lines.append(f"data: {fastjson.dumps(data)}")
    return ("\n".join(lines) + "\n\n").encode()


def stream_id_ok(value: str) -> bool:
    """A Redis stream id: two 64-bit parts (Redis refuses larger ones mid-stream)."""
    return bool(STREAM_ID_RE.match(value)) and all(int(p) < 2**64 for p in value.split("-"))


def status_event_id(rec: JobRecord) -> int:
    if rec.status.terminal:
        return END_STATUS
    if rec.status is JobStatus.RUNNING:
        return max(1, 2 * rec.attempts - 1)
    return 2 * rec.attempts


def _last_id(value: str | None) -> int:
    if value is None or value == "":
        return -1
    try:
        n = int(value)
    except ValueError:
        raise InvalidInput("Last-Event-ID: not an event id of this stream") from None
    if n < 0:
        raise InvalidInput("Last-Event-ID: not an event id of this stream")
    return n


async def _job_events(
    st: GatewayState, rec: JobRecord, owner: str | None, last: int
) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    yield f"retry: {RETRY_MS}\n\n".encode()
    quiet_since = loop.time()
    while True:
        eid = status_event_id(rec)
        if eid > last:
            last = eid
            quiet_since = loop.time()
            change = {"id": rec.id, "status": rec.status.value, "attempts": rec.attempts}
            yield sse("status", change, eid)
        if rec.status.terminal:
            if END_RESULT > last:
                yield sse("result", rec.view(), END_RESULT)
            return
        if loop.time() - quiet_since >= KEEPALIVE_S:
            quiet_since = loop.time()
            yield b": keep-alive\n\n"
        try:
            with st.waiters.waiter(rec.id) as fut:
                rec = await service.get(st, rec.id, owner)
                if rec.status.terminal or status_event_id(rec) > last:
                    continue
                try:
                    await asyncio.wait_for(fut, POLL_S)
                except TimeoutError:
                    pass
            rec = await service.get(st, rec.id, owner)
        except (ShuttingDown, JobNotFound, RedisUnavailable):
            return  # the client reconnects (another replica) and resumes


@router.get(
    "/jobs/{job_id}/events",
    response_class=StreamingResponse,
    responses={**SSE_DOC, **errors(401, 404, 422, 503)},
)
async def job_events(
    job_id: JobId, st: State, key: Caller, last_event_id: LastEventId = None
) -> Response:
    """The job's status changes as they happen, then its result; resumable."""
    last = _last_id(last_event_id)
    owner = key.name if key else None
    rec = await service.get(st, job_id, owner)  # 404 before the stream starts
    if last >= END_RESULT:  # all seen: 204 tells EventSource to stop reconnecting
        return Response(status_code=204)
    return StreamingResponse(
        _job_events(st, rec, owner, last), media_type="text/event-stream", headers=SSE_HEADERS
    )


class ViewerResponse(StreamingResponse):
    """A model event stream that leaves the hub however it ends: finished, client
    gone, or cut before its body started (when its generator never runs)."""

    def __init__(self, st: GatewayState, viewer: Viewer, last: str | None) -> None:
        super().__init__(
            _model_events(st, viewer, last), media_type="text/event-stream", headers=SSE_HEADERS
        )
        self.hub, self.viewer = st.events, viewer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.hub.leave(self.viewer)


async def _model_events(st: GatewayState, viewer: Viewer, last: str | None) -> AsyncIterator[bytes]:
    yield f"retry: {RETRY_MS}\n\n".encode()
    try:
        async for batch in st.events.follow(viewer, last):
            if not batch:
                yield b": keep-alive\n\n"
            for entry_id, fields in batch:
                jobs = [{"id": k, "status": v} for k, v in fields.items()]
                yield sse("ended", {"model": viewer.model, "jobs": jobs}, entry_id)
    except RedisUnavailable:
        return  # the catch-up failed: the client reconnects and resumes


@router.get(
    "/models/{model}/events",
    response_class=StreamingResponse,
    responses={**SSE_DOC, **errors(401, 403, 404, 422, 429, 503)},
)
async def model_events(
    model: ModelName, st: State, key: Caller, last_event_id: ModelLastEventId = None
) -> Response:
    """Every job of the model as it ends (an admin key on a gateway with keys);
    resumable for as long as the stream holds the entry (about 10,000 back)."""
    st.model(model)
    if key is not None and not key.admin:
        raise Forbidden("the model's event stream needs an admin API key")
    if last_event_id and parse_cursor(last_event_id) is None:
        raise InvalidInput(
            "Last-Event-ID: not an event id of this stream (<ms>-<seq>, one per partition, "
            "comma-separated)"
        )
    # Joined before the stream starts: past the viewer cap this is a 429, not a 200.
    return ViewerResponse(st, st.events.join(model), last_event_id or None)
