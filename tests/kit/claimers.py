"""Claimers for tests/process/queue: the functions its ``spawn`` children run.

A spawned child imports the module that holds its target function: here, a module
that needs only the queue client and tests/factories.py, not the test module
(which pulls in tests/conftest.py: pytest, hypothesis and the Redis fixtures, half
a CPU second more in each child).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

from sluice.jobs import Outcome
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.factories import sluice_config

MODEL = "m"  # tests/factories.py's one model


def drain(url: str, worker: str, lease_s: float, out: mp.Queue, start: Any) -> None:  # type: ignore[type-arg]
    """Claim and complete until the queues stay empty for 0.5 s; put the ids seen."""
    cfg = sluice_config({"batching": {"lease_s": lease_s, "max_batch": 16}})
    q = QueueClient(connect(url), dict(cfg.models))
    q.redis.ping()
    start.wait(60)  # every process connected: they race for the same jobs from here
    seen: list[str] = []
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 0.5:
        batch = q.claim(MODEL, worker)
        if not batch.jobs:
            time.sleep(0.005)
            continue
        idle_since = time.monotonic()
        seen += [j.id for j in batch.jobs]
        q.complete(MODEL, [Outcome.ok(j.id, worker) for j in batch.jobs])
    out.put(seen)


def claim_then_hang(url: str, ready: Any) -> None:
    """Claim one batch (a 0.3 s lease), say so, then hang until killed."""
    cfg = sluice_config({"batching": {"lease_s": 0.3, "max_batch": 8}})
    q = QueueClient(connect(url), dict(cfg.models))
    q.claim(MODEL, "doomed")
    ready.set()
    time.sleep(60)  # killed before it completes anything
