"""Model event streams: one blocking reader per watched model and partition, fanned
out to viewers.

Each ``GET /v1/models/{m}/events`` used to hold a connection of the request pool
in its own blocking XREAD, so as many open streams as the pool has connections
made every other request wait for one (ADR 0137). Now, per gateway process:

1. A stream joins the hub as a viewer: at most ``gateway.model_events_max_viewers``
   in all (past it ``TooManyStreams``, 429 + Retry-After), none once the gateway
   is shutting down (503). The first viewer of a model starts its readers: one per
   partition that may hold jobs (``queue.partitions``, the high-water of ADR 0160:
   each partition's scripts append to its own stream, in its own slot, and XREAD
   cannot span slots). A viewer follows every partition; when the span grows while
   it is open, it joins the new partitions' readers too (and catches up on them).
2. A reader learns its stream's newest id once (its cursor), then loops XREAD
   BLOCK from the cursor on the hub's own client, outside the request gate, and
   puts each batch of entries on every viewer's queue, marked with its partition.
3. An event's id is the viewer's *cursor*: the last entry id it sent of every
   partition, comma-separated in partition order (one partition: the plain stream
   id, as before). A resumed viewer (Last-Event-ID) catches up on each partition
   from its position up to that reader's cursor with XRANGE (short calls through
   the gate), then takes its queue, skipping ids it already sent: no gap, no
   repeat. A partition the cursor does not name (an id from before partitions, or
   a partition added since) starts at the millisecond of the newest id it names.
4. A viewer whose queue fills (its client stopped reading) is ended; it resumes
   from Redis with Last-Event-ID. One slow client never holds the others.
5. A failed read is retried from the cursor with backoff (ADR 0065): viewers get
   keep-alives meanwhile and lose nothing the stream still holds. (The inbox and
   the reader's loop are gateway/hub_reader.py's, shared with the token hub.)
6. A reader stops when its last viewer has left, after its current read (one
   block at most); ``close`` ends every stream at once (SIGTERM).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import redis.asyncio as aioredis

from gateway.hub_reader import Entry, HubReader, Inbox, id_order, next_id
from gateway.metrics import GatewayMetrics
from gateway.redis_io import bounded
from sluice import keys
from sluice.config.models import MAX_PARTITIONS
from sluice.errors import ShuttingDown, TooManyStreams

log = logging.getLogger("sluice.gateway")
READ_COUNT = 100  # entries per XREAD or XRANGE page
KEEPALIVE_S = 15.0
MAX_SEQ = 2**64 - 1
# The longest cursor: every partition's id (two 20-digit parts), comma-separated.
MAX_CURSOR_CHARS = MAX_PARTITIONS * 42


def parse_cursor(value: str) -> list[str] | None:
    """A Last-Event-ID of a model stream as partition positions (index = partition),
    or None when it is not one: 1 to MAX_PARTITIONS stream ids, comma-separated."""
    parts = value.split(",")
    if not 1 <= len(parts) <= MAX_PARTITIONS:
        return None
    for part in parts:
        ms, dash, seq = part.partition("-")
        if not (dash and ms.isdigit() and seq.isdigit() and len(ms) <= 20 and len(seq) <= 20):
            return None
        if int(ms) > MAX_SEQ or int(seq) > MAX_SEQ:
            return None
    return parts


def cursor_id(positions: dict[int, str]) -> str:
    """The event id a viewer sends: its position in every partition, in order."""
    return ",".join(positions[p] for p in sorted(positions))


def just_before(positions: Iterable[str]) -> str:
    """Where a partition the cursor does not name starts: at the millisecond of the
    newest id it names (every entry of that millisecond on; ``0-0``: all)."""
    ms = max((id_order(x)[0] for x in positions), default=0)
    return f"{ms - 1}-{MAX_SEQ}" if ms > 0 else "0-0"


class Page(list[Entry]):
    """A batch of one partition's entries."""

    def __init__(self, partition: int, entries: Iterable[Entry]) -> None:
        super().__init__(entries)
        self.partition = partition


@dataclass(eq=False)
class Viewer(Inbox):
    """One open model event stream: its readers (partition -> reader) and where each
    stood when it joined it (None: not started yet; its first cursor then)."""

    KIND: ClassVar[str] = "event stream"

    readers: dict[int, ModelReader] = field(default_factory=dict, kw_only=True)
    joined_at: dict[int, str | None] = field(default_factory=dict, kw_only=True)

    @property
    def reader(self) -> ModelReader:
        """Partition 0's reader (every viewer has one)."""
        return self.readers[0]


class ModelReader(HubReader):
    """The one blocking reader of a model partition's event stream in this process."""

    def __init__(self, hub: EventHub, model: str, partition: int = 0) -> None:
        what = "event stream" if partition == 0 else f"partition {partition} event stream"
        super().__init__(hub, model, what)
        self.hub: EventHub = hub
        self.partition = partition
        self.stream = keys.events_key(model, partition)
        self.viewers: set[Viewer] = set()
        self.start: str | None = None  # the newest id when it started; then fixed
        self.cursor: str | None = None  # the newest id read; set once, then only grows
        self.ready = asyncio.Event()  # the cursor is known (or the hub is closing)
        name = f"sluice-events-{model}-{partition}"
        self.task = asyncio.create_task(self.run(), name=name)

    def wanted(self) -> bool:
        return bool(self.viewers)

    def hand_out(self, reply: Any) -> None:
        batch: list[Entry] = reply
        if batch:
            self.cursor = batch[-1][0]
            page = Page(self.partition, batch)
            for viewer in list(self.viewers):
                viewer.offer(page)

    def inboxes(self) -> list[Inbox]:
        return list(self.viewers)

    async def run(self) -> None:
        try:
            await super().run()
        finally:
            # A resuming viewer waiting for the cursor is woken too, so it sees it
            # ended at once (its client reconnects and a new reader starts).
            self.ready.set()

    async def read(self) -> list[Entry]:
        r, timeout_s = self.hub.redis, self.hub.timeout_s
        if self.cursor is None:  # from now: the newest id, so nothing after it is missed
            newest: Any = await bounded(r.xrevrange(self.stream, count=1), timeout_s)
            self.cursor = self.start = newest[0][0] if newest else "0-0"
            self.ready.set()
        # Blocks under half the socket timeout: a quiet stream is not a dead link.
        block_ms = self.hub.block_ms
        read = r.xread({self.stream: self.cursor}, count=READ_COUNT, block=block_ms)
        reply: Any = await bounded(read, timeout_s)
        return list(reply[0][1]) if reply else []


class EventHub:
    """Every model event stream of one gateway process (see the module docstring)."""

    def __init__(
        self,
        r: aioredis.Redis,
        *,
        reads: aioredis.Redis,
        call: Callable[[Awaitable[Any]], Awaitable[Any]],
        max_viewers: int,
        timeout_s: float,
        metrics: GatewayMetrics,
        span: Callable[[str], int] | None = None,
    ) -> None:
        self.redis = r  # the readers' own client: their blocking reads never use the pool
        self.reads = reads  # the request pool, for a resumed viewer's catch-up
        self.call = call
        self.max_viewers = max_viewers
        self.timeout_s = timeout_s
        self.block_ms = int(min(1.0, timeout_s / 2) * 1000)
        self.metrics = metrics
        # How many partitions of a model may hold jobs (Partitions.span, ADR 0160).
        self.span: Callable[[str], int] = span or (lambda _model: 1)
        self.keepalive_s = KEEPALIVE_S
        self.closing = False
        self.read_failures = 0
        self._readers: dict[tuple[str, int], ModelReader] = {}
        self._viewers: set[Viewer] = set()

    @property
    def viewers(self) -> int:
        return len(self._viewers)

    @property
    def readers(self) -> int:
        """Readers still running (one that lost its last viewer ends within a block)."""
        return sum(not r.task.done() for r in self._readers.values())

    def join(self, model: str) -> Viewer:
        if self.closing:
            raise ShuttingDown("this gateway is shutting down; retry")
        if self.viewers >= self.max_viewers:
            self.metrics.event_streams_refused.inc()
            raise TooManyStreams(
                f"this gateway already serves {self.max_viewers} model event streams "
                "(gateway.model_events_max_viewers); retry later or on another replica"
            )
        viewer = Viewer(model)
        self._viewers.add(viewer)
        self.grow(viewer)
        self.metrics.event_viewers.labels(model).inc()
        return viewer

    def grow(self, viewer: Viewer) -> list[int]:
        """Join the viewer to the readers of the model's partitions it does not follow
        yet (all at first; more when the span grew); the partitions it joined."""
        added = []
        for p in range(len(viewer.readers), max(1, self.span(viewer.model))):
            reader = self._readers.get((viewer.model, p))
            if reader is None or reader.task.done():
                reader = self._readers[viewer.model, p] = ModelReader(self, viewer.model, p)
            viewer.readers[p] = reader
            viewer.joined_at[p] = reader.cursor
            reader.viewers.add(viewer)
            added.append(p)
        return added

    def leave(self, viewer: Viewer) -> None:
        """Idempotent; a reader notices its last viewer gone after its current read."""
        if viewer in self._viewers:
            self._viewers.discard(viewer)
            for reader in viewer.readers.values():
                reader.viewers.discard(viewer)
            self.metrics.event_viewers.labels(viewer.model).dec()
        viewer.closed = True

    def close(self) -> int:
        """End every stream now, and refuse new ones; returns how many ended."""
        self.closing = True
        for reader in self._readers.values():
            reader.ready.set()  # a viewer waiting for the cursor sees it is closed
        ended = 0
        for viewer in self._viewers:
            ended += not viewer.closed
            viewer.end()
        return ended

    async def stop(self) -> None:
        self.close()
        tasks = [r.task for r in self._readers.values() if not r.task.done()]
        for t in tasks:
            t.cancel()
        if tasks:  # bounded: a shutdown never hangs on a stuck connection
            await asyncio.wait(tasks, timeout=self.timeout_s)

    async def follow(self, viewer: Viewer, last: str | None) -> AsyncIterator[list[Entry]]:
        """The viewer's entries, each with its cursor as its id (after ``last`` when
        resuming: a cursor, or one stream id), ``[]`` for a keep-alive, until it is
        ended. A failed catch-up read raises RedisUnavailable."""
        given = parse_cursor(last) if last else None
        pos: dict[int, str] = {}
        async for page in self._place(viewer, list(viewer.readers), given, pos):
            yield page
        while not viewer.closed:
            try:
                batch = await asyncio.wait_for(viewer.queue.get(), self.keepalive_s)
            except TimeoutError:
                batch = []
            if batch is None:
                return
            grown = self.grow(viewer)  # the span grew (a raised partition count)
            if grown:
                async for page in self._place(viewer, grown, None, pos):
                    yield page
            p = batch.partition if isinstance(batch, Page) else 0
            fresh = [e for e in batch if id_order(e[0]) > id_order(pos[p])]
            yield self._stamped(p, fresh, pos)

    def _stamped(self, p: int, entries: list[Entry], pos: dict[int, str]) -> list[Entry]:
        """Entries of partition ``p`` with the viewer's cursor after each as its id."""
        out = []
        for entry_id, fields in entries:
            pos[p] = entry_id
            out.append((cursor_id(pos), fields))
        return out

    async def _place(
        self, viewer: Viewer, parts: list[int], given: list[str] | None, pos: dict[int, str]
    ) -> AsyncIterator[list[Entry]]:
        """Where the viewer stands in each of ``parts``, then their catch-up from Redis:
        a live viewer's first partitions start where it joined their readers; one it
        resumes starts after the id its cursor names, else (and a partition added
        later) at the millisecond of the newest position (``just_before``)."""
        live = given is None and not pos
        base = just_before(given if given is not None else list(pos.values()))
        behind = []
        for p in parts:
            if live:
                async for wait in self._ready(viewer, p):
                    yield wait
                pos[p] = viewer.joined_at.get(p) or viewer.readers[p].start or "0-0"
            else:
                pos[p] = given[p] if given is not None and p < len(given) else base
                behind.append(p)
        for p in behind:
            async for wait in self._ready(viewer, p):
                yield wait
            upto = viewer.readers[p].cursor
            if upto is None or viewer.closed:
                return
            async for page in self._backlog(viewer.readers[p].stream, pos[p], upto):
                yield self._stamped(p, page, pos)

    async def _ready(self, viewer: Viewer, p: int) -> AsyncIterator[list[Entry]]:
        """Keep-alives until partition ``p``'s reader knows its cursor (or the viewer
        was ended: a reader that stopped ends its viewers)."""
        reader = viewer.readers[p]
        while reader.cursor is None and not viewer.closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.ready.wait(), self.keepalive_s)
                if reader.cursor is None:
                    return
                continue
            yield []

    async def _backlog(self, stream: str, after: str, upto: str) -> AsyncIterator[list[Entry]]:
        while id_order(after) < id_order(upto):
            read = self.reads.xrange(stream, min=next_id(after), max=upto, count=READ_COUNT)
            page: Any = await self.call(read)
            if not page:
                return
            yield list(page)
            after = page[-1][0]
