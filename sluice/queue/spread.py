"""The protocol's calls that span a model's partitions (docs/adr/0159): the reads
that sum every partition's stats and queues, and one call per partition for the
writes whose jobs may sit in several (complete, renew, reclaim).

Aggregates are summed by these readers: no script writes outside its partition.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluice import keys
from sluice.config import PRIORITIES, ModelConfig
from sluice.jobs import BucketStats, ClassHeads, Outcome, QueueStats
from sluice.queue.call import Call
from sluice.queue.partitions import Partitions, split_by_partition
from sluice.records import (
    BUCKET_COST_PREFIX,
    BULK_RANK,
    LOW_RANK,
    SCORE_SCALE,
    bucket_cost_field,
    score_range,
)


class SpreadOps:
    """Mixin of :class:`sluice.queue.scripts.QueueOps`: the calls over all partitions."""

    models: dict[str, ModelConfig]
    parts: Partitions

    def model(self, name: str) -> ModelConfig:  # pragma: no cover - QueueOps's
        raise NotImplementedError

    def complete(
        self, model: str, outcomes: Sequence[Outcome], worker_id: str = ""
    ) -> Call[tuple[int, int]]:  # pragma: no cover - QueueOps's
        raise NotImplementedError

    def renew(
        self, model: str, worker_id: str, job_ids: Sequence[str]
    ) -> Call[list[str]]:  # pragma: no cover - QueueOps's
        raise NotImplementedError

    def renew_why(
        self, model: str, worker_id: str, job_ids: Sequence[str]
    ) -> Call[dict[str, str]]:  # pragma: no cover - QueueOps's
        raise NotImplementedError

    def reclaim(
        self, model: str, limit: int = ..., partition: int = 0
    ) -> Call[int]:  # pragma: no cover - QueueOps's
        raise NotImplementedError

    # -- writes, one call per partition ---------------------------------------
    def complete_calls(
        self, model: str, outcomes: Sequence[Outcome], worker_id: str = ""
    ) -> list[Call[tuple[int, int]]]:
        groups = split_by_partition([o.id for o in outcomes])
        return [
            self.complete(model, [outcomes[i] for i in idx], worker_id) for idx in groups.values()
        ]

    def renew_calls(
        self, model: str, worker_id: str, job_ids: Sequence[str]
    ) -> list[Call[list[str]]]:
        groups = split_by_partition(job_ids)
        return [self.renew(model, worker_id, [job_ids[i] for i in idx]) for idx in groups.values()]

    def renew_why_calls(
        self, model: str, worker_id: str, job_ids: Sequence[str]
    ) -> list[Call[dict[str, str]]]:
        groups = split_by_partition(job_ids)
        return [
            self.renew_why(model, worker_id, [job_ids[i] for i in idx]) for idx in groups.values()
        ]

    def reclaim_calls(self, model: str) -> list[Call[int]]:
        return [self.reclaim(model, partition=p) for p in range(self.parts.span(model))]

    # -- reads over every partition ---------------------------------------------
    def stats(self, model: str) -> Call[QueueStats]:
        names = self.model(model).bucket_names
        span = self.parts.span(model)
        cmds: list[tuple[Any, ...]] = []
        for p in range(span):
            cmds.append(("HGETALL", keys.stats_key(model, p)))
            cmds += [("ZCARD", keys.queue_key(model, b, p)) for b in names]
            cmds.append(("ZCARD", keys.retry_key(model, p)))
            cmds.append(("ZCARD", keys.inflight_key(model, p)))
            cmds.append(("LLEN", keys.dead_letter_key(model, p)))
        per = len(names) + 4

        def parse(r: list[Any]) -> QueueStats:
            raw: dict[str, int] = {}
            queued = [0] * len(names)
            in_flight = dead = retrying = 0
            for p in range(span):
                chunk = r[p * per : (p + 1) * per]
                for k, v in chunk[0].items():
                    raw[k] = raw.get(k, 0) + int(v)
                for i in range(len(names)):
                    queued[i] += int(chunk[1 + i])
                retrying += int(chunk[-3])
                in_flight += int(chunk[-2])
                dead += int(chunk[-1])
            buckets = [
                BucketStats(b, queued[i], max(0, raw.get(bucket_cost_field(b), 0)))
                for i, b in enumerate(names)
            ]
            counters = {k: v for k, v in raw.items() if not k.startswith(BUCKET_COST_PREFIX)}
            return QueueStats(model, buckets, in_flight, dead, counters, retrying)

        return Call(parse, commands=cmds)

    def class_heads(self, model: str) -> Call[ClassHeads]:
        """Counts and oldest entries by priority class, from the queue scores (whose
        layout only this package knows: sluice/records.py), over every partition:
        ``heads`` holds each partition's heads (the reader takes the oldest)."""
        names = self.model(model).bucket_names
        span = self.parts.span(model)
        per_bucket = 2 + len(PRIORITIES)
        cmds: list[tuple[Any, ...]] = []
        for p in range(span):
            for b in names:
                q = keys.queue_key(model, b, p)
                cmds.append(("ZCOUNT", q, "-inf", f"({LOW_RANK * SCORE_SCALE}"))  # high, normal
                cmds.append(("ZCOUNT", q, *score_range(BULK_RANK)))
                for rank in range(len(PRIORITIES)):
                    cmds.append(("ZRANGEBYSCORE", q, *score_range(rank), "LIMIT", 0, 1))

        def parse(r: list[Any]) -> ClassHeads:
            above_low, bulk_counts, heads = 0, [0] * len(names), []
            for j in range(span * len(names)):
                chunk = r[j * per_bucket : (j + 1) * per_bucket]
                above_low += int(chunk[0])
                bulk_counts[j % len(names)] += int(chunk[1])
                heads += [ids[0] for ids in chunk[2:] if ids]
            return ClassHeads(above_low, bulk_counts, heads)

        return Call(parse, commands=cmds)

    def dead_letters(self, model: str, limit: int = 100) -> Call[list[str]]:
        """The newest dead letters of each partition, partition 0's first, at most
        ``limit`` in all."""
        span = self.parts.span(model)
        cmds = [("LRANGE", keys.dead_letter_key(model, p), 0, limit - 1) for p in range(span)]
        return Call(
            lambda r: [i for ids in r for i in ids][:limit],
            commands=cmds,  # type: ignore[arg-type]
        )
