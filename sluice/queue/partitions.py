"""Which partition a call goes to (``queue.partitions``, docs/adr/0159).

A model's queues may be spread over N hash tags (``sluice.keys``: partition 0 keeps
``{model}``, partition p the tag ``{model~p}``), so a Redis Cluster can put them on
different shards. Every script still touches one partition (one slot); this module
owns the choices around them: which partition a submit goes to and the share of
the admission limits it checks there, the order a worker visits partitions in, and
how many partitions the readers and claims visit (the *span*: the configured count,
or more while partitions of an earlier, larger count may still hold jobs), and
where an idempotency key made under an earlier count may live (docs/adr/0163).
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sluice import keys
from sluice.config import ModelConfig
from sluice.jobs import NewJob
from sluice.queue.call import Call

# The partitions zset's members (ADR 0160, 0163): "n" scores the high-water; "c<k>"
# when a client configured with k partitions last refreshed (unix s); "since" when
# the first partitioned client wrote the key (until then every client had one).
HIGH_WATER_MEMBER = "n"
SINCE_MEMBER = "since"
# A count seen this long before a key's TTL began may still have made it: a client
# records its count every refresh (30 s), and clocks of hosts differ a little.
SEEN_SLACK_S = 120.0


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
        # model -> {partition count: when a client last ran with it (unix s)}
        self.seen: dict[str, dict[int, float]] = {}
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
            return _idem_hash(owner, idem) % n
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

    def idem_lookup(
        self, model: str, jobs: Sequence[NewJob], owner: str, fenced: bool, now_s: float
    ) -> Call[int] | None:
        """Where a keyed submit goes when its key may have been made under another
        partition count (ADR 0163): one round trip of GETs of the key in its partition
        now, then in each partition it hashed to under the other counts a client ran
        with within the key's TTL (most recent first); the first that holds the key,
        else its own. None (no lookup) in the usual case: no other count in the window."""
        seen = self.seen.get(model)
        idem = next((j.idempotency_key for j in jobs if j.idempotency_key), None)
        if not seen or not idem or fenced or any(j.id for j in jobs):
            return None
        n, h = self.count(model), _idem_hash(owner, idem)
        since = now_s - self.models[model].queue.idempotency_ttl_s - SEEN_SLACK_S
        order = [h % n]
        for k, at in sorted(seen.items(), key=lambda kv: -kv[1]):
            if k != n and at >= since and h % k not in order:
                order.append(h % k)
        if len(order) == 1:
            return None
        stored = owned_idem(owner, idem)
        cmds = [("GET", keys.idempotency_key(model, stored, p)) for p in order]

        def first_holding(replies: list[Any]) -> int:
            return next((p for p, v in zip(order, replies, strict=True) if v), order[0])

        return Call(first_holding, commands=cmds)

    def refresh_commands(self, now_s: float | None = None) -> list[tuple[Any, ...]]:
        """Raise each partitioned model's high-water to its configured count and record
        that count as seen now (and since when the model is partitioned); a model once
        partitioned records a count of 1 too. Then read every model's members back (a
        model never partitioned has no key: one read, no write)."""
        now = round(time.time() if now_s is None else now_s, 3)
        cmds: list[tuple[Any, ...]] = []
        for m in self.models:
            k, n = keys.partitions_key(m), self.count(m)
            if n > 1:
                cmds.append(("ZADD", k, "GT", n, HIGH_WATER_MEMBER))
                cmds.append(("ZADD", k, "NX", now, SINCE_MEMBER))
            if n > 1 or self.high_water.get(m, 1) > 1:
                cmds.append(("ZADD", k, "GT", now, f"c{n}"))
        return cmds + [("ZRANGE", keys.partitions_key(m), 0, -1, "WITHSCORES") for m in self.models]

    def refreshed(self, replies: list[Any]) -> None:
        """Take the reads of :meth:`refresh_commands` (its last reply per model)."""
        reads = replies[len(replies) - len(self.models) :]
        for m, reply in zip(self.models, reads, strict=True):
            members = _scores(reply)
            score = members.get(HIGH_WATER_MEMBER)
            self.high_water[m] = int(score) if score is not None else self.count(m)
            seen = {int(k[1:]): t for k, t in members.items() if k[:1] == "c" and k[1:].isdigit()}
            if SINCE_MEMBER in members:  # before it, every client ran with one partition
                seen[1] = max(seen.get(1, 0.0), members[SINCE_MEMBER])
            self.seen[m] = seen


def owned_idem(owner: str, key: str | None) -> str:
    """An idempotency key as stored: each API key has its own namespace, so key A's
    Idempotency-Key never replays B's job. Names cannot contain '/', so
    "<owner>/<key>" never collides with an open key ('' = no key)."""
    if not key:
        return ""
    return f"{owner}/{key}" if owner else key


def _idem_hash(owner: str, idem: str) -> int:
    return zlib.crc32(f"{owner}/{idem}".encode())


def _scores(reply: Any) -> dict[str, float]:
    """ZRANGE WITHSCORES through execute_command: flat [member, score, ...] (RESP2)
    or [[member, score], ...] (RESP3), bytes or str."""
    pairs = (
        [tuple(x) for x in reply]
        if reply and isinstance(reply[0], list | tuple)
        else list(zip(reply[::2], reply[1::2], strict=True))
    )
    out = {}
    for member, score in pairs:
        name = member.decode() if isinstance(member, bytes) else str(member)
        out[name] = float(score)
    return out


def split_by_partition(ids: Sequence[str]) -> dict[int, list[int]]:
    """Indexes of ``ids`` grouped by the partition each id names, in first-seen order
    (no ids: one empty group of partition 0, so a call with none still runs once)."""
    out: dict[int, list[int]] = {} if ids else {0: []}
    for i, job_id in enumerate(ids):
        out.setdefault(keys.partition_of(job_id), []).append(i)
    return out
