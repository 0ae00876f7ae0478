"""Per-model snapshots of queue and worker state, refreshed in the background.

One pipelined round trip reads every model's stats and live workers; metrics
gauges, Retry-After and the workers-ready check read the snapshot, so neither a
scrape nor a submit pays for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.admission import Load, drain_rate
from gateway.metrics import GatewayMetrics
from gateway.redis_io import RedisGate, raise_if_cancelling, run_reads
from sluice import keys
from sluice.backoff import Reconnect
from sluice.bulk.ops import parse_report
from sluice.config import ModelConfig
from sluice.errors import SluiceError
from sluice.jobs import QueueStats
from sluice.queue.pause import PauseState, state_call
from sluice.queue.scripts import Call, QueueOps
from sluice.records import Stat
from sluice.registry import WorkerInfo, list_workers_call, prune

log = logging.getLogger("sluice.gateway")
RATE_SMOOTHING = 0.3  # weight of the newest completion-rate sample
PARTS_EVERY_S = 30.0  # how often the snapshot refresh reads the partition high-water


@dataclass(frozen=True, slots=True)
class ModelSnapshot:
    stats: QueueStats
    workers: list[WorkerInfo]
    at_s: float
    completion_rate: float  # cost/s completed, smoothed over refreshes
    pause: PauseState | None = None  # paused by an operator (ADR 0154)

    def load(self) -> Load:
        ready = [w for w in self.workers if w.state == "ready"]
        reported = sum(max(0.0, w.service_rate) for w in ready)
        return Load(
            queued=self.stats.queued,
            queued_cost=self.stats.queued_cost,
            ready_workers=len(ready),
            # A warm-pool worker still loading parks: it is no capacity on its way.
            starting_since_s=[
                w.started_at for w in self.workers if w.state == "starting" and not w.parked
            ],
            measured_rate=reported if reported > 0 else self.completion_rate,
        )


def _smoothed_rate(prev: ModelSnapshot | None, stats: QueueStats, now_s: float) -> float:
    if prev is None:
        return 0.0
    dt = now_s - prev.at_s
    done_key = Stat.COMPLETED_COST
    done = stats.counters.get(done_key, 0) - prev.stats.counters.get(done_key, 0)
    if dt <= 0 or done < 0:
        return prev.completion_rate
    sample = done / dt
    if prev.completion_rate <= 0:
        return sample
    return RATE_SMOOTHING * sample + (1 - RATE_SMOOTHING) * prev.completion_rate


def _bulk_reports(model: str) -> Call[dict[str, str]]:
    return Call(lambda r: dict(r[0]), commands=[("HGETALL", keys.bulk_backlog_key(model))])


class Snapshots:
    def __init__(
        self,
        r: aioredis.Redis,
        models: dict[str, ModelConfig],
        metrics: GatewayMetrics,
        call: RedisGate,
    ) -> None:
        self.redis = r
        self.models = models
        self.ops = QueueOps(models)
        self.metrics = metrics
        self.call = call
        self.current: dict[str, ModelSnapshot] = {}
        self.last_ok_s = 0.0
        self.retry = Reconnect(log, "gateway snapshots")
        self._parts_due = 0.0  # monotonic: when to read the partition high-water again
        self._loads: dict[str, tuple[ModelSnapshot, Load]] = {}  # load() of each snapshot

    def load(self, model: str) -> Load | None:
        """The model's Load from the current snapshot (made once per snapshot)."""
        snap = self.current.get(model)
        if not snap:
            return None
        kept = self._loads.get(model)
        if kept is None or kept[0] is not snap:
            kept = self._loads[model] = (snap, snap.load())
        return kept[1]

    async def refresh(self, now_s: float | None = None) -> dict[str, ModelSnapshot]:
        now = time.time() if now_s is None else now_s
        calls: list[Call[Any]] = []
        for name in self.models:
            calls += [self.ops.stats(name), list_workers_call(name), _bulk_reports(name)]
            calls.append(state_call(name))
        parts = self.ops.parts
        due = time.monotonic() >= self._parts_due
        if due:  # the partition high-water (ADR 0160), every PARTS_EVERY_S
            calls.append(Call(list, commands=parts.refresh_commands()))
        replies = await self.call(run_reads(self.redis, calls))
        if due:
            parts.refreshed(replies.pop())
            self._parts_due = time.monotonic() + PARTS_EVERY_S
        fresh, lapsed = {}, []
        for i, name in enumerate(self.models):
            stats, (workers, stale), bulk, pause = replies[4 * i : 4 * i + 4]
            live = [x for x in (parse_report(v, int(now * 1000)) for v in bulk.values()) if x]
            self.metrics.set_bulk(name, live)
            lapsed += prune(name, stale)
            rate = _smoothed_rate(self.current.get(name), stats, now)
            snap = fresh[name] = ModelSnapshot(stats, workers, now, rate, pause)
            self.metrics.paused.labels(name).set(1 if pause.paused else 0)
            rate_now = drain_rate(self.models[name], snap.load()).cost_per_s
            self.metrics.set_snapshot(stats, workers, rate_now)
        self.current = fresh
        self.last_ok_s = now
        self.metrics.snapshot_age.set(0)
        if lapsed:
            await self._prune(lapsed)
        return fresh

    async def _prune(self, commands: list[tuple[Any, ...]]) -> None:
        """Forget workers whose heartbeat lapsed (died without deregistering).

        The autoscaler prunes too; without one, the worker hash and set would keep
        an entry per crashed worker forever. Best effort: the next refresh retries.
        """
        pipe = self.redis.pipeline(transaction=False)
        for cmd in commands:
            pipe.execute_command(*cmd)
        try:
            await self.call(pipe.execute())
        except (SluiceError, RedisError) as e:  # e.g. OOM under maxmemory
            log.debug("pruning lapsed workers failed: %s", e)

    async def run(self, interval_s: float) -> None:
        """Refresh forever; a failed read keeps the last snapshot and is retried next
        tick (never faster: the interval bounds the retry rate). One log line per outage."""
        while True:
            try:
                await self.refresh()
                self.retry.ok()
            except SluiceError as e:
                raise_if_cancelling()
                if self.last_ok_s:
                    self.metrics.snapshot_age.set(time.time() - self.last_ok_s)
                self.retry.failed(e)
            except Exception:  # never let the refresher die
                raise_if_cancelling()
                log.exception("snapshot refresh crashed")
            raise_if_cancelling()
            await asyncio.sleep(interval_s)
