"""Generative jobs' token streams, followed for many clients by one reader per model.

A client of ``GET /v1/jobs/{id}/stream`` (or a streaming ``/v1/completions``)
never holds a Redis connection of its own in a blocking read (ADR 0148). Per
gateway process and generative model:

1. A client joins as a :class:`Listener` of its job's stream (``keys.stream_key``).
   At most ``max_listeners`` in all (past it ``TooManyStreams``: 429); none while
   the gateway shuts down (503).
2. The model's reader loops one ``XREAD BLOCK`` over every followed stream of the
   model (one key per followed job, all on the model's hash tag, so one Cluster
   slot), from each stream's cursor, on the hub's own client, and hands each
   stream's new entries to its listeners' queues.
3. Joining catches up at once with XRANGE through the request gate: a new stream
   enters the reader at the last id caught up; a stream already followed is
   joined first and caught up after, the listener skipping ids it has sent. No
   gap, no repeat, and the first tokens never wait for the reader's next round.
4. A failed read is retried from the same cursors with backoff (ADR 0065):
   streams keep their entries (unlike pub/sub), so a Redis reconnect loses none.
   (The inbox and the reader's loop are gateway/hub_reader.py's, shared with the
   model event hub.)
5. One timer task hands idle listeners a keep-alive (no timer per wait). A
   listener whose queue fills (its client stopped reading) is ended: it
   resumes from Redis with ``Last-Event-ID``. The reader stops when its model
   has no followed stream, after its current read (``block_ms`` at most).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import redis.asyncio as aioredis

from gateway.hub_reader import Entry, HubReader, Inbox, id_order, next_id
from gateway.redis_io import bounded
from sluice import keys
from sluice.errors import ShuttingDown, TooManyStreams
from sluice.records import StreamEvent, StreamField

log = logging.getLogger("sluice.gateway")
READ_COUNT = 512  # entries per stream per XREAD, and per XRANGE page
BLOCK_MS = 100  # a newly followed stream joins the reader's read within this
MAX_LISTENERS = 10_000  # open token streams per gateway process
KEEPALIVE_S = 15.0
FINAL = frozenset({StreamEvent.END.value, StreamEvent.ERROR.value})


def is_final(entry: Entry) -> bool:
    """The job's last entry (end or error): nothing follows it."""
    return entry[1].get(StreamField.TYPE) in FINAL


@dataclass(eq=False)
class Listener(Inbox):
    """One client following one job's stream (entries: an id and StreamField fields)."""

    KIND: ClassVar[str] = "token stream"

    job_id: str
    fed_at: float = 0.0  # loop time of the last batch offered (keep-alives count)

    def offer(self, batch: list[Entry]) -> None:
        self.fed_at = asyncio.get_running_loop().time()
        super().offer(batch)


@dataclass(eq=False)
class Watched:
    """One followed stream: where the reader is in it, and who follows it."""

    cursor: str
    listeners: set[Listener] = field(default_factory=set)


class StreamReader(HubReader):
    """The one blocking reader of a model's followed token streams in this process."""

    def __init__(self, hub: TokenHub, model: str) -> None:
        super().__init__(hub, model, "token stream")
        self.hub: TokenHub = hub
        self.streams: dict[str, Watched] = {}  # stream key -> its reader state
        self.task: asyncio.Task[None] | None = None
        self.reads = 0  # XREAD calls made (one per round, however many streams)

    def ensure_running(self) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self.run(), name=f"sluice-tokens-{self.model}")

    def wanted(self) -> bool:
        return bool(self.streams)

    def hand_out(self, reply: Any) -> None:
        for key, entries in reply:
            watched = self.streams.get(key)
            if watched is None or not entries:
                continue
            batch = [(eid, dict(fields)) for eid, fields in entries]
            watched.cursor = batch[-1][0]
            for listener in list(watched.listeners):
                listener.offer(batch)

    def inboxes(self) -> list[Inbox]:
        return [listener for w in self.streams.values() for listener in w.listeners]

    async def read(self) -> list[tuple[str, list[Any]]]:
        hub = self.hub
        cursors: dict[Any, Any] = {key: w.cursor for key, w in self.streams.items()}
        self.reads += 1
        read = hub.redis.xread(cursors, count=READ_COUNT, block=hub.block_ms)
        reply: Any = await bounded(read, hub.timeout_s)
        if not reply:
            return []
        if isinstance(reply, dict):  # RESP3 clients answer a map
            return list(reply.items())
        return [(key, entries) for key, entries in reply]


class TokenHub:
    """Every followed token stream of one gateway process (see the module docstring)."""

    def __init__(
        self,
        r: aioredis.Redis,
        *,
        reads: aioredis.Redis,
        call: Callable[[Awaitable[Any]], Awaitable[Any]],
        timeout_s: float,
        max_listeners: int = MAX_LISTENERS,
        block_ms: int = BLOCK_MS,
    ) -> None:
        self.redis = r  # the readers' own client: their blocking reads never use the pool
        self.reads = reads  # the request pool, for a joining listener's catch-up
        self.call = call
        self.timeout_s = timeout_s
        self.max_listeners = max_listeners
        self.block_ms = int(min(block_ms, timeout_s * 500))  # under half the socket timeout
        self.keepalive_s = KEEPALIVE_S
        self.closing = False
        self.read_failures = 0
        self.keepalives = 0  # keep-alives handed to idle listeners
        self.readers: dict[str, StreamReader] = {}
        self._listeners: set[Listener] = set()
        self._ticker: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        """One timer for every listener: each idle for ``keepalive_s`` gets ``[]``
        (a keep-alive), instead of a timer per wait on a queue."""
        loop = asyncio.get_running_loop()
        while self._listeners and not self.closing:
            await asyncio.sleep(self.keepalive_s / 2)
            idle_since = loop.time() - self.keepalive_s
            for listener in list(self._listeners):
                if not listener.closed and listener.fed_at <= idle_since:
                    self.keepalives += 1
                    listener.offer([])

    @property
    def listeners(self) -> int:
        return len(self._listeners)

    def join(self, model: str, job_id: str) -> Listener:
        """A listener of the job's stream (it reads nothing until :meth:`follow`).
        ``job_id`` may be "" to take a slot before the job is submitted: set the
        listener's ``job_id`` before following it."""
        if self.closing:
            raise ShuttingDown("this gateway is shutting down; retry")
        if len(self._listeners) >= self.max_listeners:
            raise TooManyStreams(
                f"this gateway already serves {self.max_listeners} token streams; "
                "retry later or on another replica"
            )
        listener = Listener(model, job_id, fed_at=asyncio.get_running_loop().time())
        self._listeners.add(listener)
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.create_task(self._tick(), name="sluice-token-keepalive")
        return listener

    def leave(self, listener: Listener) -> None:
        """Idempotent; the stream leaves its reader with its last listener."""
        self._listeners.discard(listener)
        listener.closed = True
        reader = self.readers.get(listener.model)
        if reader is None:
            return
        key = keys.stream_key(listener.model, listener.job_id)
        watched = reader.streams.get(key)
        if watched is not None:
            watched.listeners.discard(listener)
            if not watched.listeners:
                del reader.streams[key]

    def close(self) -> int:
        """End every stream now and refuse new ones; returns how many ended."""
        self.closing = True
        ended = 0
        for listener in list(self._listeners):
            ended += not listener.closed
            listener.end()
        return ended

    async def stop(self) -> None:
        self.close()
        tasks = [r.task for r in self.readers.values() if r.task and not r.task.done()]
        if self._ticker is not None and not self._ticker.done():
            tasks.append(self._ticker)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=self.timeout_s)

    def _watch(self, listener: Listener, key: str, cursor: str) -> bool:
        """Add the listener to the stream's reader; True when the stream was new."""
        reader = self.readers.get(listener.model)
        if reader is None:
            reader = self.readers[listener.model] = StreamReader(self, listener.model)
        watched = reader.streams.get(key)
        new = watched is None
        if watched is None:
            watched = reader.streams[key] = Watched(cursor)
        watched.listeners.add(listener)
        reader.ensure_running()
        return new

    def _followed(self, listener: Listener, key: str) -> bool:
        reader = self.readers.get(listener.model)
        return reader is not None and key in reader.streams

    async def follow(
        self, listener: Listener, after: str = "0-0"
    ) -> AsyncGenerator[list[Entry], None]:
        """The stream's entries after ``after`` in batches, ``[]`` for a keep-alive,
        until its end or error entry (included) or the listener is ended. A failed
        catch-up read raises RedisUnavailable."""
        key = keys.stream_key(listener.model, listener.job_id)
        last = after
        joined = self._followed(listener, key)
        if joined:
            self._watch(listener, key, last)  # joined first: the catch-up overlaps
        async for page in self._catch_up(key, last):
            last = page[-1][0]
            yield page
            if is_final(page[-1]):
                return
        if listener.closed:
            return
        if not joined:
            # No await between the check and the join: a stream still unfollowed
            # enters the reader at the last id caught up.
            again = self._followed(listener, key)
            self._watch(listener, key, last)
            if again:  # another listener started it meanwhile, maybe from further on
                async for page in self._catch_up(key, last):
                    last = page[-1][0]
                    yield page
                    if is_final(page[-1]):
                        return
        async for batch in self._queued(listener, last):
            yield batch
            if batch and is_final(batch[-1]):
                return

    async def _queued(self, listener: Listener, last: str) -> AsyncIterator[list[Entry]]:
        while True:
            batch = await listener.queue.get()
            if batch is None:
                return
            if not batch:  # the ticker's keep-alive
                yield []
                continue
            fresh = [e for e in batch if id_order(e[0]) > id_order(last)]
            if fresh:
                last = fresh[-1][0]
                yield fresh

    def catch_up(self, model: str, job_id: str, after: str) -> AsyncIterator[list[Entry]]:
        """Pages of what the job's stream holds after ``after`` (request gate reads)."""
        return self._catch_up(keys.stream_key(model, job_id), after)

    async def _catch_up(self, key: str, after: str) -> AsyncIterator[list[Entry]]:
        while True:
            page: Any = await self.call(
                self.reads.xrange(key, min=next_id(after), max="+", count=READ_COUNT)
            )
            if not page:
                return
            yield [(eid, dict(fields)) for eid, fields in page]
            if len(page) < READ_COUNT:
                return
            after = page[-1][0]
