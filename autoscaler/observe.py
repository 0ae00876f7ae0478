"""Read one model's queue, latency and worker signals from Redis into a Snapshot.

Three round trips per model and period: the stats read (counts, cost, counters),
a pipeline of the queue heads per priority, the bulk item counts, recent wait
histograms, the coordinators' bulk backlog reports, whether the model is paused
and the worker registry, then
the enqueue times of those heads (the age of the oldest job: the wait histogram is
written at claim time, so a queue nobody claims from would otherwise look healthy).
Rates come from the counters' deltas over the windows this observer keeps. A failed
read returns None: decide() then holds. A read only reads: the lapsed workers it finds
in the registry are returned in the Snapshot, and the loop's upkeep prunes them.

Bulk items (rank 3, ADR 0090) are split out here, so the Observation's queued,
queued_cost and arrival rates are interactive only: bulk_arrived_cost is subtracted
from arrived_cost before the rates, and each bucket's bulk share of its queued cost
is estimated from its bulk item count (``_bulk_split``).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from autoscaler.observation import GenerateSignals, Observation
from autoscaler.policy import BURST_RATE_S, RECENT_RATE_S
from autoscaler.rates import Sample, window_rates
from sluice import keys, registry, waits
from sluice.backoff import Reconnect
from sluice.bulk.ops import parse_report
from sluice.config import ModelConfig
from sluice.errors import RedisUnavailable
from sluice.generate.admission import expected_output
from sluice.jobs import ClassHeads, QueueStats
from sluice.queue import QueueClient
from sluice.queue.client import REDIS_ERRORS
from sluice.queue.scripts import Call
from sluice.records import JobField, Stat
from sluice.registry import WorkerInfo

log = logging.getLogger("sluice.autoscaler")
# A coordinator reports every poll; one silent this long is dead (the reaper resumes it).


@dataclass(frozen=True, slots=True)
class BulkSignals:
    """Bulk items in the queues (count, estimated cost) and all unfinished bulk work."""

    queued: int = 0
    queued_cost: float = 0.0
    backlog_cost: float = 0.0


@dataclass(frozen=True, slots=True)
class Reading:
    """One model's raw signals at one instant (before rates)."""

    now_s: float
    stats: QueueStats
    queued_non_low: int
    oldest_wait_ms: float
    p99_wait_ms: float | None
    workers: list[WorkerInfo]
    bulk: BulkSignals
    stale_workers: list[str]  # registered, heartbeat lapsed: the loop's upkeep prunes them
    ttft_counts: list[int] | None = None  # generative models: TTFT histogram, metrics window
    paused: bool = False  # an operator paused the model (ADR 0154)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One good read of one model: what decide() sees, and the workers behind it."""

    observation: Observation
    workers: tuple[WorkerInfo, ...]  # live, from heartbeats: the backend's to see
    stale_workers: tuple[str, ...] = ()  # lapsed registry entries, for the upkeep step


def _bulk_split(
    stats: QueueStats, bulk_counts: list[int], reports: dict[str, Any], now_ms: int
) -> BulkSignals:
    """Bulk items per bucket (exact, ZCOUNT of the rank-3 scores) and their cost: the
    bucket's queued cost times their share of its jobs. Jobs of one bucket are of one
    size class, and the split is exact for a bucket holding only one kind. The backlog
    is the live reports' sum plus any queued bulk cost no live report covers (items a
    dead coordinator left queued are still work)."""
    queued, cost = 0, 0.0
    for b, n in zip(stats.buckets, bulk_counts, strict=True):
        n = min(n, b.queued)  # read a moment after the stats: never more than it held
        queued += n
        cost += b.queued_cost * n / b.queued if n else 0.0
    live = [x for x in (parse_report(v, now_ms) for v in reports.values()) if x is not None]
    reported_queued = sum(q for q, _ in live)
    backlog = sum(bl for _, bl in live) + max(0.0, cost - reported_queued)
    return BulkSignals(queued, cost, backlog)


@dataclass(frozen=True, slots=True)
class WorkerSignals:
    counts: dict[str, int]  # by state; "starting" only those that will serve (not parked)
    service_rate: float | None
    cold_start_s: float | None
    promote_s: float | None  # median of the promoted workers' command-to-first-claim
    start_path: tuple[tuple[str, float], ...]  # median seconds per start stage


def _slope(samples: deque[Sample], now: Sample, window_s: float) -> float | None:
    """The arrival rate's trend (cost units/s per second): the newer half-window's rate
    minus the older half's, over half the window; None until samples cover 90% of it."""
    base = next((s for s in samples if s.t_s >= now.t_s - window_s - 1e-6), None)
    if base is None or now.t_s - base.t_s < 0.9 * window_s:
        return None
    mid_t = base.t_s + (now.t_s - base.t_s) / 2
    mid = next((s for s in samples if s.t_s >= mid_t - 1e-6), None)
    if mid is None or mid.t_s <= base.t_s or now.t_s <= mid.t_s:
        return None
    old = (mid.arrived_cost - base.arrived_cost) / (mid.t_s - base.t_s)
    new = (now.arrived_cost - mid.arrived_cost) / (now.t_s - mid.t_s)
    return (new - old) / ((now.t_s - base.t_s) / 2)


def _worker_signals(workers: list[WorkerInfo]) -> WorkerSignals:
    counts = registry.workers_by_state(workers)
    # A warm-pool refill still loading parks once loaded: it is no capacity on its way.
    counts["starting"] = sum(1 for w in workers if w.state == "starting" and not w.parked)
    rates = [w.service_rate for w in workers if w.state == "ready" and w.service_rate > 0]
    colds = [w.ready_at - w.started_at for w in workers if w.ready_at and w.started_at]
    promotes = [float(w.extra["promote_s"]) for w in workers if "promote_s" in w.extra]
    stages: dict[str, list[float]] = {}
    for w in workers:
        for stage, seconds in (w.extra.get("start_path") or {}).items():
            stages.setdefault(stage, []).append(float(seconds))
    return WorkerSignals(
        counts,
        statistics.fmean(rates) if rates else None,
        statistics.median(colds) if colds else None,
        statistics.median(promotes) if promotes else None,
        tuple((s, round(statistics.median(v), 3)) for s, v in stages.items()),
    )


def generate_signals(
    workers: list[WorkerInfo],
    in_flight: int,
    slots: int,
    expected_output_tokens: float,
    ttft_counts: list[int] | None,
) -> GenerateSignals:
    """Slots per replica (the serving workers' reports, else the configured), active
    sequences (their busy slots, never fewer than the jobs in flight: a heartbeat is up
    to a period old), tokens/s per serving replica, and the TTFT p50/p99."""
    serving = [w for w in workers if w.serving]
    reported = [w.slots for w in serving if w.slots > 0]
    busy = sum(w.slots_busy for w in serving)
    rates = [w.tokens_per_s for w in serving if w.tokens_per_s > 0]
    counts = ttft_counts or []
    return GenerateSignals(
        slots=round(statistics.median(reported)) if reported else slots,
        slots_busy=max(busy, in_flight),
        slots_total=sum(reported),
        ttft_p50_ms=waits.quantile_ms(counts, 0.5) if counts else None,
        ttft_p99_ms=waits.quantile_ms(counts) if counts else None,
        tokens_per_s=statistics.fmean(rates) if rates else None,
        expected_output_tokens=float(expected_output_tokens),
    )


class Observer:
    """Keeps each model's counter samples between reads (for the rate windows); writes
    nothing to Redis."""

    def __init__(
        self,
        client: QueueClient,
        models: dict[str, ModelConfig],
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.models = models
        self.wall = wall
        self.samples: dict[str, deque[Sample]] = {}
        self.outages: dict[str, Reconnect] = {}  # one log line per outage (ADR 0065)

    def read(self, model: str, current: int = 0) -> Snapshot | None:
        """The model's signals now, or None when Redis failed (one log line per outage).
        ``current`` only fills the Observation's field: the loop sets the backend's."""
        outage = self.outages.setdefault(model, Reconnect(log, f"autoscaler: {model}: read"))
        try:
            reading = self._read(model)
        except (RedisUnavailable, *REDIS_ERRORS, redis.RedisError) as e:
            outage.failed(f"{e}; holding the replica count")
            return None
        outage.ok()
        obs = self._observe(model, reading, current)
        return Snapshot(obs, tuple(reading.workers), tuple(reading.stale_workers))

    def _read(self, model: str) -> Reading:
        stats = self.client.stats(model)
        r = self.client.redis
        pipe = r.pipeline(transaction=False)
        pipe.execute_command(*registry.time_command(keys.stats_key(model)))
        classes = self.client.ops.class_heads(model)
        for cmd in classes.commands:
            pipe.execute_command(*cmd)
        wall = self.wall()
        windows = waits.recent_windows(wall)
        hists = [(w, p) for p in range(self.client.ops.parts.span(model)) for w in windows]
        for w, p in hists:  # every partition's histograms, merged (ADR 0159)
            pipe.hgetall(keys.wait_hist_key(model, w, p))
        ttft = self._ttft_keys(model, wall)
        for k in ttft:
            pipe.hgetall(k)
        pipe.hgetall(keys.bulk_backlog_key(model))
        pipe.exists(keys.paused_key(model))
        wcall = registry.list_workers_call(model)
        for cmd in wcall.commands:
            pipe.execute_command(*cmd)
        replies = pipe.execute()
        return self._parse(model, stats, replies, classes, len(hists), wcall, len(ttft))

    def _ttft_keys(self, model: str, wall: float) -> list[str]:
        """A generative model's TTFT histogram windows over metrics_window_s (none for
        the others: their read is unchanged)."""
        cfg = self.models[model]
        if cfg.generate is None:
            return []
        span = cfg.autoscaling.metrics_window_s
        return waits.window_keys(keys.ttft_hist_prefix(model), wall, span)

    def _parse(
        self,
        model: str,
        stats: QueueStats,
        replies: list[Any],
        classes: Call[ClassHeads],
        n_windows: int,
        wcall: Any,
        n_ttft: int = 0,
    ) -> Reading:
        secs, micros = replies[0]  # TIME through time.lua: two strings
        server_ms = int(secs) * 1000 + int(micros) // 1000
        at = 1 + len(classes.commands)
        heads = classes.parse(replies[1:at])
        non_low, bulk_counts = heads.above_low, heads.bulk_counts
        counts = waits.merge(replies[at : at + n_windows])
        at += n_windows
        ttft = waits.merge(replies[at : at + n_ttft]) if n_ttft else None
        at += n_ttft
        bulk = _bulk_split(stats, bulk_counts, replies[at], server_ms)
        paused = bool(int(replies[at + 1]))
        workers, stale = wcall.parse(replies[at + 2 :])
        oldest = self._oldest_wait_ms(model, heads.heads, server_ms)
        p99 = waits.quantile_ms(counts)
        return Reading(self.wall(), stats, non_low, oldest, p99, workers, bulk, stale, ttft, paused)

    def _oldest_wait_ms(self, model: str, heads: list[str], server_ms: int) -> float:
        if not heads:
            return 0.0
        pipe = self.client.redis.pipeline(transaction=False)
        for jid in heads:
            pipe.hget(keys.job_key(model, jid), JobField.ENQ)
        enqs = [int(float(e)) for e in pipe.execute() if e is not None]
        return float(max(0, server_ms - min(enqs))) if enqs else 0.0

    def _observe(self, model: str, rd: Reading, current: int) -> Observation:
        c, bulk = rd.stats.counters, rd.bulk
        # Rates are interactive: bulk arrivals only fill headroom (ADR 0090).
        arrived = c.get(Stat.ARRIVED_COST, 0) - c.get(Stat.BULK_ARRIVED_COST, 0)
        now = Sample(rd.now_s, arrived, c.get(Stat.COMPLETED_COST, 0))
        samples = self.samples.setdefault(model, deque())
        if samples and (
            now.arrived_cost < samples[-1].arrived_cost
            or now.completed_cost < samples[-1].completed_cost
        ):
            samples.clear()  # counters went back (Redis flushed): rates start over
        span = self.models[model].autoscaling.metrics_window_s
        long = window_rates(samples, now, span)
        short = window_rates(samples, now, min(span, RECENT_RATE_S))
        burst = window_rates(samples, now, min(span, BURST_RATE_S))
        policy = self.models[model].autoscaling
        slope = _slope(samples, now, policy.predict.window_s)
        samples.append(now)
        keep_s = max(span, policy.predict.window_s) + 60
        while samples and samples[0].t_s < now.t_s - keep_s:
            samples.popleft()
        ws = _worker_signals(rd.workers)
        counts = ws.counts
        queued = max(0, rd.stats.queued - bulk.queued)
        queued_cost = max(0.0, rd.stats.queued_cost - bulk.queued_cost) if queued else 0.0
        return Observation(
            current=current,
            ready=counts.get("ready", 0),
            starting=counts.get("starting", 0),
            draining=counts.get("draining", 0),
            parked=counts.get("standby", 0),
            queued=queued,
            queued_cost=queued_cost,
            queued_non_low=rd.queued_non_low,
            in_flight=rd.stats.in_flight,
            arrival_rate_cost=long[0] if long else None,
            arrival_rate_cost_recent=short[0] if short else None,
            arrival_rate_cost_burst=burst[0] if burst else None,
            arrival_rate_slope=slope,
            completion_rate_cost=long[1] if long else None,
            completion_rate_cost_recent=short[1] if short else None,
            service_rate=ws.service_rate,
            p99_wait_ms=rd.p99_wait_ms,
            oldest_wait_ms=rd.oldest_wait_ms,
            cold_start_s=ws.cold_start_s,
            promote_s=ws.promote_s,
            start_path=ws.start_path,
            bulk_queued=bulk.queued,
            bulk_queued_cost=bulk.queued_cost,
            bulk_backlog_cost=bulk.backlog_cost,
            generate=self._generate(model, rd),
            paused=rd.paused,
        )

    def _generate(self, model: str, rd: Reading) -> GenerateSignals | None:
        cfg = self.models[model].generate
        if cfg is None:
            return None
        # The mean output of the model's finished jobs (the step script's stats), else
        # the configured prior.
        learned = expected_output(rd.stats.counters)
        out = cfg.expected_output_tokens if learned is None else learned
        return generate_signals(rd.workers, rd.stats.in_flight, cfg.slots, out, rd.ttft_counts)
