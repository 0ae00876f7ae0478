"""One generative job's token stream as the gateway serves it: entries from the
hub until the end or error entry, and an ending made from the job record when the
job ended without one (cancelled or expired in the queue, failed before a run).

Both ``GET /v1/jobs/{id}/stream`` (gateway.routers.stream) and OpenAI's
streaming completions (gateway.routers.generate) read a job through
:func:`job_entries`; they differ only in how they write what it yields.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from gateway import service
from gateway.state import GatewayState
from gateway.token_hub import Entry, Listener, is_final
from sluice.errors import JobNotFound
from sluice.jobs import JobRecord, JobStatus
from sluice.records import StreamEvent, StreamField

SYNTHETIC_ID = ""  # an ending made from the job record: not a stream entry, no SSE id


def ending_of(rec: JobRecord) -> Entry:
    """The end or error entry the record implies, for a job whose stream has none."""
    attempt = str(max(1, rec.attempts))
    if rec.status is JobStatus.SUCCEEDED:
        result = json.dumps(rec.result)
        return SYNTHETIC_ID, {
            StreamField.TYPE: StreamEvent.END,
            StreamField.ATTEMPT: attempt,
            StreamField.RESULT: result,
        }
    error = rec.error or {"type": rec.status.value, "message": f"the job {rec.status.value}"}
    return SYNTHETIC_ID, {
        StreamField.TYPE: StreamEvent.ERROR,
        StreamField.ATTEMPT: attempt,
        StreamField.ERROR: json.dumps({"status": rec.status.value, **error}),
    }


async def _finish(st: GatewayState, rec: JobRecord, last: str) -> AsyncIterator[list[Entry]]:
    """The job has ended: what the stream still holds after ``last``, then the
    record's ending if the stream had none."""
    async for page in st.tokens.catch_up(rec.model, rec.id, last):
        yield page
        if is_final(page[-1]):
            return
    yield [ending_of(rec)]


async def _live(
    st: GatewayState, listener: Listener, after: str, ended: asyncio.Future[Any]
) -> AsyncIterator[list[Entry]]:
    """The hub's batches until a final entry, the hub ends the listener, or the job
    ends (``ended``: its done notification) with no final entry seen."""
    batches = st.tokens.follow(listener, after)
    nxt: asyncio.Future[list[Entry]] = asyncio.ensure_future(batches.__anext__())
    try:
        while True:
            both: set[asyncio.Future[Any]] = {nxt, ended}
            await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
            if not nxt.done():
                return  # the job ended: the caller reads what the stream still holds
            try:
                batch = nxt.result()
            except StopAsyncIteration:
                return
            yield batch
            if batch and is_final(batch[-1]):
                return
            nxt = asyncio.ensure_future(batches.__anext__())
    finally:
        nxt.cancel()
        with contextlib.suppress(BaseException):
            await nxt
        with contextlib.suppress(BaseException):
            await batches.aclose()


async def job_entries(
    st: GatewayState, listener: Listener, rec: JobRecord, after: str, owner: str | None
) -> AsyncIterator[list[Entry]]:
    """Entry batches after ``after`` (``[]``: a keep-alive), the last one final.

    Ends early (no final batch) when the hub ends the listener (a slow client, a
    shutdown) or the job is gone: the client resumes from its last id. Raises
    ShuttingDown when the gateway closes while it waits."""
    last = after
    with st.waiters.waiter(rec.id) as ended:
        if not rec.status.terminal:  # read again once registered: no end is missed
            rec = await service.get(st, rec.id, owner)
        if not rec.status.terminal:
            async for batch in _live(st, listener, after, ended):
                if batch:
                    last = batch[-1][0]
                yield batch
                if batch and is_final(batch[-1]):
                    return
            if not ended.done():
                return  # the hub ended the listener: the client resumes
            ended.result()  # ShuttingDown: the client resumes elsewhere
            try:
                rec = await service.get(st, rec.id, owner)
            except JobNotFound:
                return
            if not rec.status.terminal:
                return
    async for page in _finish(st, rec, last):
        yield page
