"""What the gateway's two stream hubs share: a client's inbox, and the loop of
the one blocking reader that feeds many inboxes.

gateway/event_hub.py (model event streams, ``GET /v1/models/{m}/events``) and
gateway/token_hub.py (generative jobs' token streams) each run one reader per
model that loops a blocking XREAD on the hub's own client and hands each batch
of entries to the inboxes of the clients following it. This module owns the
parts that are the same in both: the inbox (a bounded queue of batches; one that
fills is ended, and its client resumes from Redis), the reader's loop (a failed
read retried from the same cursor with backoff, ADR 0065; a reader that stops
for any reason ends its inboxes), and the stream id order. What each hub reads,
and who follows what, stays in the hub.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from gateway.redis_io import raise_if_cancelling
from sluice.backoff import Reconnect
from sluice.errors import RedisUnavailable

log = logging.getLogger("sluice.gateway")
Entry = tuple[str, dict[str, str]]  # a stream entry: its id and its fields
QUEUE_BATCHES = 1000  # reads an inbox may fall behind before it is ended
RECONNECT_BASE_S = 0.05
RECONNECT_MAX_S = 2.0


def id_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def next_id(entry_id: str) -> str:
    """The smallest id after ``entry_id`` (XRANGE's exclusive "(" needs Redis 6.2)."""
    ms, seq = id_order(entry_id)
    return f"{ms}-{seq + 1}" if seq < 2**64 - 1 else f"{ms + 1}-0"


def _new_queue() -> asyncio.Queue[list[Entry] | None]:
    return asyncio.Queue(QUEUE_BATCHES)


@dataclass(eq=False)
class Inbox:
    """One client's stream: the batches its reader hands it, None when it must end."""

    KIND: ClassVar[str] = "stream"  # what its log line calls it

    model: str
    queue: asyncio.Queue[list[Entry] | None] = field(default_factory=_new_queue, kw_only=True)
    closed: bool = field(default=False, kw_only=True)

    def offer(self, batch: list[Entry]) -> None:
        try:
            self.queue.put_nowait(batch)
        except asyncio.QueueFull:
            log.info("a %s %s fell %d reads behind; ended", self.model, self.KIND, QUEUE_BATCHES)
            self.end()

    def end(self) -> None:
        if self.closed:
            return
        self.closed = True
        while not self.queue.empty():  # room for the end marker, and nothing after it
            self.queue.get_nowait()
        self.queue.put_nowait(None)


class ReaderHub(Protocol):
    closing: bool
    read_failures: int


class HubReader(ABC):
    """The one blocking reader of a model's streams in this process: read, hand out,
    retry a failed read; its inboxes end when it stops (a bug, cancellation, the
    hub closing), so no client waits on a dead reader: it resumes from Redis."""

    def __init__(self, hub: ReaderHub, model: str, what: str) -> None:
        self.hub = hub
        self.model = model
        self.what = what  # "event stream", "token stream": for the logs
        self.retry = Reconnect(
            log, f"gateway {model} {what}s", base_s=RECONNECT_BASE_S, cap_s=RECONNECT_MAX_S
        )

    @abstractmethod
    def wanted(self) -> bool:
        """Someone still follows: keep reading."""

    @abstractmethod
    async def read(self) -> Any:
        """One blocking read (RedisUnavailable when it fails)."""

    @abstractmethod
    def hand_out(self, reply: Any) -> None:
        """Offer what ``read`` returned to the inboxes that follow it."""

    @abstractmethod
    def inboxes(self) -> list[Inbox]:
        """Every inbox this reader feeds."""

    async def run(self) -> None:
        try:
            while self.wanted() and not self.hub.closing:
                try:
                    reply = await self.read()
                except RedisUnavailable as e:
                    raise_if_cancelling()
                    self.hub.read_failures += 1
                    await asyncio.sleep(self.retry.failed(e))
                    continue
                self.retry.ok()
                self.hand_out(reply)
        except Exception:
            # Logged, not re-raised: nobody awaits this task, so a raise would only
            # surface as "Task exception was never retrieved".
            log.exception("the %s %s reader failed; its streams end", self.model, self.what)
        finally:
            for inbox in self.inboxes():
                inbox.end()
