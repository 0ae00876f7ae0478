"""One round trip of the queue protocol, as the clients run it (``sluice.queue.scripts``
builds them; ``sluice.queue.client`` executes them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One round trip: a script (``script``) or pipelined read commands (``commands``)."""

    parse: Callable[[Any], T]
    script: str = ""
    keys: Sequence[str] = ()
    args: Sequence[Any] = ()
    commands: Sequence[tuple[Any, ...]] = ()
    # Durability "replica": after the script, WAIT until this many replicas hold its
    # writes, or raise NotReplicated after replica_timeout_ms (docs/adr/0133).
    replicas: int = 0
    replica_timeout_ms: int = 0
    # A write acknowledged as this model's queue.durability says, resolved by the
    # client that runs it (calls built without the model configs: sluice.bulk's).
    durability_of: str = ""
    # What a caller may do when no replica confirmed (the NotReplicated message).
    unacked_hint: str = "retry with the same Idempotency-Key"
