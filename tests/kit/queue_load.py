"""A queue under steady load while Redis changes beneath it (a slot moved, a shard's
primary killed): one thread submitting with idempotency keys, one claiming and
completing, each retrying what Redis refused, as gateways and workers do.

The worker stops only once the submitter has stopped and a claim made after that
found nothing, so every accepted job has run when :meth:`Load.join` returns: a
worker that stopped at the first empty claim after ``stop`` left behind a submit
still in flight at that moment (accepted, never run; a flake on a loaded machine).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from redis.exceptions import RedisError

from sluice.config import ModelConfig
from sluice.errors import RedisUnavailable
from sluice.jobs import JobStatus, NewJob, Outcome, QueueStats
from sluice.local.redis_topology import LocalCluster
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.waits import HUNG_S, wait_until

T = TypeVar("T")


class Load:
    """``accepted``: input text -> job id; ``ran``: job id -> completions;
    ``refused``: ``"submit|claim|complete: ErrorType"`` -> count. With ``give_up``
    a refused submit is counted and skipped (the caller moves on) instead of retried."""

    def __init__(
        self, url: str, models: dict[str, ModelConfig], model: str, give_up: bool = False
    ) -> None:
        self.url, self.models, self.model, self.give_up = url, models, model, give_up
        self.accepted: dict[str, str] = {}
        self.ran: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.errors: list[BaseException] = []  # what ended a thread unexpectedly
        self.stop = threading.Event()
        self._submits_over = threading.Event()
        self.threads = [
            threading.Thread(target=self._guarded, args=(f,), daemon=True)
            for f in (self._submit, self._work)
        ]

    def start(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def join(self) -> None:
        """Stop submitting, let the worker run what is left, and wait for both."""
        self.stop.set()
        for t in self.threads:
            t.join(HUNG_S)
        assert not self.errors, self.errors
        assert not any(t.is_alive() for t in self.threads), "the load did not stop"

    def refusals(self, what: str) -> int:
        """How often Redis refused ``what`` (submit, claim or complete)."""
        return sum(n for k, n in self.refused.items() if k.startswith(f"{what}:"))

    def _guarded(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - join() reports it
            self.errors.append(e)
            self._submits_over.set()  # a dead submitter must not hold the worker

    def _retry(self, what: str, fn: Callable[[], T]) -> T:
        while True:
            try:
                return fn()
            except (RedisUnavailable, RedisError) as e:
                self.refused[f"{what}: {type(e).__name__}"] += 1
                time.sleep(0.01)

    def _submit(self) -> None:
        q = QueueClient(connect(self.url), self.models)
        i = 0
        try:
            while not self.stop.is_set():
                i += 1
                job = NewJob(f"t{i}", "32", 2, idempotency_key=f"k{i}")
                if self.give_up:
                    try:
                        [s] = q.submit(self.model, [job])
                    except (RedisUnavailable, RedisError) as e:
                        self.refused[f"submit: {type(e).__name__}"] += 1
                        time.sleep(0.01)
                        continue
                else:
                    [s] = self._retry("submit", lambda job=job: q.submit(self.model, [job]))  # type: ignore[misc]
                self.accepted[f"t{i}"] = s.id
        finally:
            self._submits_over.set()
            q.redis.close()

    def _work(self) -> None:
        q = QueueClient(connect(self.url), self.models)
        try:
            while True:
                # Read before the claim: once set, every accepted job is in a queue.
                over = self._submits_over.is_set()
                batch = self._retry("claim", lambda: q.claim(self.model, "w1", max_batch=8))
                if not batch.jobs:
                    if over:
                        return
                    time.sleep(0.005)
                    continue
                done = [Outcome.ok(j.id, j.input) for j in batch.jobs]
                self._retry("complete", lambda done=done: q.complete(self.model, done, "w1"))  # type: ignore[misc]
                for j in batch.jobs:
                    self.ran[j.id] += 1
        finally:
            q.redis.close()


def move_slot_under_load(
    cluster: LocalCluster, models: dict[str, ModelConfig], model: str, slot: int
) -> tuple[Load, int]:
    """Moves ``slot`` to another node while a :class:`Load` runs (300 jobs accepted
    before, 200 after); returns the joined load and how many keys moved."""
    load = Load(cluster.url, models, model).start()
    try:
        wait_until(lambda: len(load.accepted) >= 300, HUNG_S, "300 accepted jobs")
        src = cluster.owner(slot)
        dst = next(n for n in cluster.nodes if n.port != src.port)
        # 10 keys a MIGRATE (redis-cli's default), slowed so the load meets the split.
        moved = cluster.migrate_slot(slot, dst, batch=10, pause_s=0.005)
        assert cluster.owner(slot).port == dst.port
        base = len(load.accepted)
        wait_until(lambda: len(load.accepted) >= base + 200, HUNG_S, "submits after the move")
    finally:
        load.join()
    return load, moved


def every_job_ran_once(
    url: str, models: dict[str, ModelConfig], model: str, load: Load
) -> QueueStats:
    """Asserts every accepted job succeeded with its own text and ran exactly once;
    returns the model's stats after."""
    q = QueueClient(connect(url), models)
    try:
        for text, job_id in load.accepted.items():
            rec = q.get(job_id, model)
            assert rec.status is JobStatus.SUCCEEDED and rec.result == text, (job_id, rec)
        assert all(n == 1 for n in load.ran.values())
        assert set(load.ran) == set(load.accepted.values())
        return q.stats(model)
    finally:
        q.redis.close()
