"""Reading a generative job's token stream (ADR 0144) and following it.

:func:`read_stream` (async, the gateway) and :func:`read_stream_sync` (the Python
client, tests) read entries after an id, optionally blocking; :func:`parse_entry`
turns one into a :class:`StreamEntry` (layout: ``sluice.records.StreamField``).

:class:`Follower` is pure: fed the entries in order, it returns only the output a
client has not been shown. Any ``start`` or ``restart`` entry begins a run at
token offset 0 (a restart: another attempt; a start again: a job handed back
unstarted, under the same attempt number); since a re-run reproduces the same
tokens (greedy or the stored seed), the follower skips the token offsets and the
text it has already delivered, so a client ends with the whole output and no
token twice. To resume after a disconnect (SSE ``Last-Event-ID``), feed the
stream from its start and drop the deltas of entries at or before that id.

A stream ends with an ``end`` or ``error`` entry, except where no worker could
write one (a job cancelled or expired while queued, failed when its lease lapsed
for the last time): a reader that sees no entry for a while reads the job's status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis

from sluice import fastjson, keys
from sluice.connection import read_timeout_s
from sluice.jobs import JobRecord, JobStatus
from sluice.records import StreamEvent
from sluice.records import StreamField as S


@dataclass(frozen=True, slots=True)
class StreamEntry:
    id: str  # the Redis entry id: the SSE event id
    type: StreamEvent
    attempt: int
    index: int = 0
    token_ids: tuple[int, ...] = ()
    text: str = ""
    result: dict[str, Any] | None = None  # end
    error: str | None = None  # error: the error as stored (JSON text)


@dataclass(frozen=True, slots=True)
class Delta:
    """New output for a client: ``token_ids`` start at output offset ``index``."""

    text: str
    token_ids: tuple[int, ...]
    index: int


def _str(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def parse_entry(entry_id: str | bytes, fields: Mapping[Any, Any]) -> StreamEntry:
    """One XRANGE/XREAD entry (text or bytes replies)."""
    f = {_str(k): _str(v) for k, v in fields.items()}
    kind = StreamEvent(f[S.TYPE])
    ids = f.get(S.IDS)
    result = f.get(S.RESULT)
    return StreamEntry(
        id=_str(entry_id),
        type=kind,
        attempt=int(f.get(S.ATTEMPT, 1)),
        index=int(f.get(S.INDEX, 0)),
        token_ids=tuple(fastjson.loads(ids)) if ids else (),
        text=f.get(S.TEXT, ""),
        result=fastjson.loads(result) if result else None,
        error=f.get(S.ERROR),
    )


def _xread_args(
    r: Any, model: str, job_id: str, after: str, block_ms: int | None, count: int
) -> dict[str, Any]:
    kw: dict[str, Any] = {"streams": {keys.stream_key(model, job_id): after}, "count": count}
    if block_ms is not None:
        # Kept under half the socket timeout, so a quiet stream never reads as a dead
        # connection (BLOCK 0, forever, is never sent).
        sock = read_timeout_s(r)
        kw["block"] = max(1, min(block_ms, int(sock * 500)) if sock else block_ms)
    return kw


def _entries(reply: Any) -> list[StreamEntry]:
    if not reply:
        return []
    # RESP2: [[key, [(id, fields), ...]]]; RESP3: {key: [[(id, fields), ...]]}
    runs = reply.values() if isinstance(reply, dict) else (r[1] for r in reply)
    out = []
    for run in runs:
        items = run[0] if run and isinstance(run[0], list) else run
        out += [parse_entry(eid, fields) for eid, fields in items]
    return out


async def read_stream(
    r: aioredis.Redis,
    model: str,
    job_id: str,
    after: str = "0-0",
    block_ms: int | None = None,
    count: int = 512,
) -> list[StreamEntry]:
    """Entries after ``after`` (an entry id; ``$``: only new ones), at most ``count``;
    with ``block_ms``, wait up to that long (at most half the client's socket
    timeout) for the first one ([] when none came)."""
    return _entries(await r.xread(**_xread_args(r, model, job_id, after, block_ms, count)))


def read_stream_sync(
    r: redis.Redis,
    model: str,
    job_id: str,
    after: str = "0-0",
    block_ms: int | None = None,
    count: int = 512,
) -> list[StreamEntry]:
    """:func:`read_stream` on a sync client."""
    return _entries(r.xread(**_xread_args(r, model, job_id, after, block_ms, count)))


def entry_from_record(record: JobRecord) -> StreamEntry | None:
    """The stream's last word for a job that has ended, from its record (None while
    it runs or waits): for a stream that ended without one (see the module
    docstring), or expired before its reader came."""
    if record.status == JobStatus.SUCCEEDED:
        result = record.result if isinstance(record.result, dict) else {}
        return StreamEntry("", StreamEvent.END, record.attempts, result=result)
    if record.status in (JobStatus.FAILED, JobStatus.EXPIRED, JobStatus.CANCELLED):
        error = record.error or {"type": record.status.value, "message": f"the job {record.status}"}
        return StreamEntry("", StreamEvent.ERROR, record.attempts, error=fastjson.dumps(error))
    return None


class Follower:
    """What a client has been shown of one job's stream (module docstring)."""

    def __init__(self) -> None:
        self._ids: list[int] = []  # token ids delivered, in output order
        self._text = ""  # text delivered
        self._attempt = 0
        self._run_text = 0  # chars of text the current run has written
        self._restarts = 0
        self._result: dict[str, Any] | None = None
        self._error: str | None = None
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    @property
    def result(self) -> dict[str, Any] | None:
        return self._result

    @property
    def error(self) -> str | None:
        return self._error

    @property
    def restarts(self) -> int:
        return self._restarts

    @property
    def attempt(self) -> int:
        return self._attempt

    @property
    def text(self) -> str:
        return self._text

    @property
    def token_ids(self) -> tuple[int, ...]:
        return tuple(self._ids)

    def feed(self, entry: StreamEntry) -> list[Delta]:
        if self._done:
            return []
        if entry.type in (StreamEvent.START, StreamEvent.RESTART):
            # A run begins (a released job runs again under the same attempt number).
            if entry.attempt >= self._attempt:
                self._restarts += self._attempt > 0 or entry.type == StreamEvent.RESTART
                self._attempt, self._run_text = entry.attempt, 0
            return []
        if entry.type == StreamEvent.TOKENS:
            return self._tokens(entry)
        self._done = True
        if entry.type == StreamEvent.ERROR:
            self._error = entry.error or "the job failed"
            return []
        self._result = entry.result or {}
        return self._rest(self._result)

    def _tokens(self, e: StreamEntry) -> list[Delta]:
        if e.attempt < self._attempt:
            return []  # a superseded run's late write
        if e.attempt > self._attempt:  # its START was trimmed or never read
            self._attempt, self._run_text = e.attempt, 0
        start = self._run_text
        self._run_text += len(e.text)
        if e.index > len(self._ids):
            return []  # a gap (entries trimmed by MAXLEN): the end entry fills it
        text = e.text[max(0, len(self._text) - start) :]
        return self._deliver(text, e.token_ids[len(self._ids) - e.index :], len(self._ids))

    def _deliver(self, text: str, ids: tuple[int, ...], index: int) -> list[Delta]:
        if not text and not ids:
            return []
        self._text += text
        self._ids += ids
        return [Delta(text, tuple(ids), index)]

    def _rest(self, result: Mapping[str, Any]) -> list[Delta]:
        """What the result holds beyond what was delivered (an end written by a run
        older than the last restart, or a final flush of text)."""
        ids = tuple(result.get("token_ids") or ())
        full = str(result.get("text") or "")
        text = full[len(self._text) :] if full.startswith(self._text) else ""
        return self._deliver(text, ids[len(self._ids) :], len(self._ids))
