"""Model event streams: one blocking reader per watched model, fanned out to viewers.

Each ``GET /v1/models/{m}/events`` used to hold a connection of the request pool
in its own blocking XREAD, so as many open streams as the pool has connections
made every other request wait for one (ADR 0137). Now, per gateway process:

1. A stream joins the hub as a viewer: at most ``gateway.model_events_max_viewers``
   in all (past it ``TooManyStreams``, 429 + Retry-After), none once the gateway
   is shutting down (503). The first viewer of a model starts its reader.
2. The reader learns the stream's newest id once (its cursor), then loops XREAD
   BLOCK from the cursor on the hub's own client, outside the request gate, and
   puts each batch of entries on every viewer's queue.
3. A resumed viewer (Last-Event-ID) waits for the reader's cursor, reads what it
   missed up to the cursor with XRANGE (short calls through the gate), then
   takes its queue, skipping ids it already sent: no gap, no repeat.
4. A viewer whose queue fills (its client stopped reading) is ended; it resumes
   from Redis with Last-Event-ID. One slow client never holds the others.
5. A failed read is retried from the cursor with backoff (ADR 0065): viewers get
   keep-alives meanwhile and lose nothing the stream still holds. (The inbox and
   the reader's loop are gateway/hub_reader.py's, shared with the token hub.)
6. The reader stops when its last viewer has left, after its current read (one
   block at most); ``close`` ends every stream at once (SIGTERM).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import redis.asyncio as aioredis

from gateway.hub_reader import Entry, HubReader, Inbox, id_order, next_id
from gateway.metrics import GatewayMetrics
from gateway.redis_io import bounded
from sluice import keys
from sluice.errors import ShuttingDown, TooManyStreams

log = logging.getLogger("sluice.gateway")
READ_COUNT = 100  # entries per XREAD or XRANGE page
KEEPALIVE_S = 15.0


@dataclass(eq=False)
class Viewer(Inbox):
    """One open model event stream (entries: an id, then job id -> status)."""

    KIND: ClassVar[str] = "event stream"

    reader: ModelReader


class ModelReader(HubReader):
    """The one blocking reader of a model's event stream in this process."""

    def __init__(self, hub: EventHub, model: str) -> None:
        super().__init__(hub, model, "event stream")
        self.hub: EventHub = hub
        self.stream = keys.events_key(model)
        self.viewers: set[Viewer] = set()
        self.cursor: str | None = None  # the newest id read; set once, then only grows
        self.ready = asyncio.Event()  # the cursor is known (or the hub is closing)
        self.task = asyncio.create_task(self.run(), name=f"sluice-events-{model}")

    def wanted(self) -> bool:
        return bool(self.viewers)

    def hand_out(self, reply: Any) -> None:
        batch: list[Entry] = reply
        if batch:
            self.cursor = batch[-1][0]
            for viewer in list(self.viewers):
                viewer.offer(batch)

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
            self.cursor = newest[0][0] if newest else "0-0"
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
    ) -> None:
        self.redis = r  # the readers' own client: their blocking reads never use the pool
        self.reads = reads  # the request pool, for a resumed viewer's catch-up
        self.call = call
        self.max_viewers = max_viewers
        self.timeout_s = timeout_s
        self.block_ms = int(min(1.0, timeout_s / 2) * 1000)
        self.metrics = metrics
        self.keepalive_s = KEEPALIVE_S
        self.closing = False
        self.read_failures = 0
        self._readers: dict[str, ModelReader] = {}

    @property
    def viewers(self) -> int:
        return sum(len(r.viewers) for r in self._readers.values())

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
        reader = self._readers.get(model)
        if reader is None or reader.task.done():
            reader = self._readers[model] = ModelReader(self, model)
        viewer = Viewer(model, reader)
        reader.viewers.add(viewer)
        self.metrics.event_viewers.labels(model).inc()
        return viewer

    def leave(self, viewer: Viewer) -> None:
        """Idempotent; the reader notices its last viewer gone after its current read."""
        if viewer in viewer.reader.viewers:
            viewer.reader.viewers.discard(viewer)
            self.metrics.event_viewers.labels(viewer.model).dec()
        viewer.closed = True

    def close(self) -> int:
        """End every stream now, and refuse new ones; returns how many ended."""
        self.closing = True
        ended = 0
        for reader in self._readers.values():
            reader.ready.set()  # a viewer waiting for the cursor sees it is closed
            for viewer in reader.viewers:
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
        """The viewer's batches (after ``last`` when resuming), ``[]`` for a keep-alive,
        until it is ended. A failed catch-up read raises RedisUnavailable."""
        reader = viewer.reader
        while last is not None and reader.cursor is None and not viewer.closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.ready.wait(), self.keepalive_s)
                continue
            yield []
        if last is not None and reader.cursor is not None and not viewer.closed:
            async for page in self._backlog(viewer.model, last, reader.cursor):
                last = page[-1][0]
                yield page
        while True:
            try:
                batch = await asyncio.wait_for(viewer.queue.get(), self.keepalive_s)
            except TimeoutError:
                yield []
                continue
            if batch is None:
                return
            fresh = [e for e in batch if last is None or id_order(e[0]) > id_order(last)]
            if fresh:
                last = fresh[-1][0]
                yield fresh

    async def _backlog(self, model: str, after: str, upto: str) -> AsyncIterator[list[Entry]]:
        stream = keys.events_key(model)
        while id_order(after) < id_order(upto):
            read = self.reads.xrange(stream, min=next_id(after), max=upto, count=READ_COUNT)
            page: Any = await self.call(read)
            if not page:
                return
            yield list(page)
            after = page[-1][0]
