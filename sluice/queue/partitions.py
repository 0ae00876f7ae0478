"""Which partition a call goes to (``queue.partitions``, docs/adr/0159).

A model's queues may be spread over N hash tags (``sluice.keys``: partition 0 keeps
``{model}``, partition p the tag ``{model~p}``), so a Redis Cluster can put them on
different shards. Every script still touches one partition (one slot); this module
owns the choices around them: which partition a submit goes to and the share of
the admission limits it checks there, the order a worker visits partitions in, and
how many partitions the readers and claims visit (the *span*: the configured count,
or more while partitions of an earlier, larger count may still hold jobs).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sluice import keys
from sluice.config import ModelConfig
from sluice.jobs import NewJob

# Where the partition high-water lives in the partitions zset (one member).
HIGH_WATER_MEMBER = "n"


@dataclass(frozen=True, slots=True)
class Shares:
    """One partition's share of a submit's admission limits (0 = no limit)."""

    max_jobs: int
    max_cost: int
    owner_max: int
    rate: float
    burst: int


def share(limit: int, n: int) -> int:
    """A partition's share of a count limit: ceil(limit / n), 0 (no limit) kept."""
    return math.ceil(limit / n) if limit > 0 else 0


class Partitions:
    """Per-process partition state: the round-robin cursors and the known high-water
    of every model (refreshed by :meth:`sluice.queue.client.QueueClient.refresh_partitions`)."""

    def __init__(self, models: dict[str, ModelConfig]) -> None:
        self.models = models
        self.high_water: dict[str, int] = {}
        self._rr: dict[tuple[str, str], int] = {}  # (model, owner) -> next submit partition
        self._cursor: dict[tuple[str, str], int] = {}  # (model, worker) -> next claim partition

    def count(self, model: str) -> int:
        """The configured partition count (where new jobs go)."""
        return self.models[model].queue.partitions

    def span(self, model: str) -> int:
        """How many partitions may hold jobs: readers and claims visit 0..span-1."""
        return max(self.count(model), self.high_water.get(model, 1))

    def for_submit(self, model: str, jobs: Sequence[NewJob], owner: str, fenced: bool) -> int:
        """A fenced submit (a bulk coordinator's: its fence lives in partition 0) and
        jobs with ids keep the ids' partition; a job with an idempotency key goes where
        the key hashes (a replay meets its first job); others go round-robin per owner."""
        n = self.count(model)
        given = {keys.partition_of(j.id) for j in jobs if j.id}
        if len(given) > 1:
            raise ValueError("one submit's job ids name different partitions")
        if given:
            return given.pop()
        if fenced or n == 1:
            return 0
        idem = next((j.idempotency_key for j in jobs if j.idempotency_key), None)
        if idem:
            return zlib.crc32(f"{owner}/{idem}".encode()) % n
        at = self._rr.get((model, owner), zlib.crc32(owner.encode()))
        self._rr[(model, owner)] = at + 1
        return at % n

    def shares(self, model: str, max_jobs: int, max_cost: int, owner: Any) -> Shares:
        """Each partition admits its share of the model's and the owner's limits: the
        totals may reach limit + N - 1 (ceil per partition), ADR 0159."""
        n = self.count(model)
        if n == 1:
            return Shares(max_jobs, max_cost, owner.max_unfinished, owner.rate_per_s, owner.burst)
        return Shares(
            share(max_jobs, n),
            share(max_cost, n),
            share(owner.max_unfinished, n),
            owner.rate_per_s / n,
            share(max(1, owner.burst), n),
        )

    def claim_order(self, model: str, worker: str) -> list[int]:
        """The partitions a worker's claim tries, in order: its cursor first (where it
        took its last batch, moved on one), then the rest, so it idles only when all
        are empty and serves them in turn."""
        span = self.span(model)
        start = self._cursor.get((model, worker), zlib.crc32(worker.encode())) % span
        return [(start + i) % span for i in range(span)]

    def served(self, model: str, worker: str, partition: int) -> None:
        """A claim found work in ``partition``: the next claim starts after it."""
        self._cursor[(model, worker)] = partition + 1

    def wait_partition(self, model: str, worker: str) -> int:
        """The partition whose wake lists an idle worker blocks on (one slot: BLPOP
        cannot span partitions); it moves on each wait, so idle workers watch all."""
        order = self.claim_order(model, worker)
        self._cursor[(model, worker)] = order[0] + 1
        return order[0]

    def refresh_commands(self) -> list[tuple[Any, ...]]:
        """Raise each partitioned model's high-water to its configured count, and read
        every model's back (a model never partitioned has no key: one read, no write)."""
        cmds: list[tuple[Any, ...]] = []
        for m in self.models:
            k = keys.partitions_key(m)
            if self.count(m) > 1:
                cmds.append(("ZADD", k, "GT", self.count(m), HIGH_WATER_MEMBER))
            cmds.append(("ZSCORE", k, HIGH_WATER_MEMBER))
        return cmds

    def refreshed(self, replies: list[Any]) -> None:
        at = 0
        for m in self.models:
            at += 2 if self.count(m) > 1 else 1
            score = replies[at - 1]
            self.high_water[m] = int(float(score)) if score is not None else self.count(m)


def split_by_partition(ids: Sequence[str]) -> dict[int, list[int]]:
    """Indexes of ``ids`` grouped by the partition each id names, in first-seen order
    (no ids: one empty group of partition 0, so a call with none still runs once)."""
    out: dict[int, list[int]] = {} if ids else {0: []}
    for i, job_id in enumerate(ids):
        out.setdefault(keys.partition_of(job_id), []).append(i)
    return out
