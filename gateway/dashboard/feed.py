"""The dashboard's data: one pipelined Redis round trip per refresh, shared by viewers.

Every model's queue stats, live workers, recent wait and end-to-end histograms,
the autoscaler's latest decision and log, and the newest dead-letter ids are read
in a single pipeline. Details of dead letters (their errors) cost a second round
trip only when a new id appears. The result is cached for a little less than
the page's poll interval and a refresh in progress is shared: ten open tabs
polling every second cost Redis what one does.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import redis.asyncio as aioredis

from gateway.dashboard import view
from gateway.dashboard.verdict import Signals, verdict
from gateway.redis_io import RedisGate, run_reads
from sluice import keys
from sluice.config import ModelConfig
from sluice.jobs import QueueStats
from sluice.queue.pause import state_call
from sluice.queue.scripts import Call, QueueOps
from sluice.records import JobField
from sluice.registry import WorkerInfo, list_workers_call
from sluice.waits import WINDOW_S, recent_windows, window_keys, window_start
from sluice.webhooks.ops import WebhookOps

LATENCY_SPAN_S = 10.0  # the current (partial) 10 s window and the one before it
DEAD_SHOWN = 5
DECISIONS_SHOWN = 20
DEAD_FIELDS = (JobField.ERROR, JobField.FIN, JobField.ATT, JobField.BUCKET)
HISTORY_S = 300  # what a page opened now starts with (the windows live 1 h in Redis)
HISTORY_TTL_S = 10.0  # a new window every 10 s: no point reading more often
# The cache lives this share of the poll interval: a lone viewer polling every
# poll_s then gets fresh data on each poll (a TTL of a full poll_s would serve
# every other poll from the cache), and any number of viewers cost Redis at
# most 1 / (0.8 poll_s) reads a second.
CACHE_SHARE = 0.8


def model_reads(
    ops: QueueOps, model: str, now_s: float, generative: bool = False
) -> Call[dict[str, Any]]:
    """One model's reads as one Call (its commands join the shared pipeline); a
    generative model's also read its time-to-first-token windows (ADR 0149)."""
    hooks = WebhookOps([model], {model: ops.parts.span(model)})
    parts: list[tuple[str, Call[Any]]] = [
        ("stats", ops.stats(model)),
        ("workers", list_workers_call(model)),
    ]
    windows = recent_windows(now_s, LATENCY_SPAN_S)
    parts += [
        ("wait", _hists(keys.wait_hist_key, model, windows, ops.parts.span(model))),
        ("e2e", _hists(keys.e2e_hist_key, model, windows, ops.parts.span(model))),
        ("scale", _many([("HGETALL", keys.scale_state_key(model))])),
        ("decisions", _many([("LRANGE", keys.decisions_key(model), 0, DECISIONS_SHOWN - 1)])),
        ("dead", ops.dead_letters(model, DEAD_SHOWN)),
        ("webhooks", hooks.backlog(model, int(now_s * 1000))),
        ("pause", state_call(model)),
    ]
    if generative:
        ttft = window_keys(keys.ttft_hist_prefix(model), now_s, LATENCY_SPAN_S)
        parts.append(("ttft", _many([("HGETALL", k) for k in ttft])))
    cmds = [cmd for _, call in parts for cmd in call.commands]

    def parse(replies: list[Any]) -> dict[str, Any]:
        out, i = {}, 0
        for name, call in parts:
            n = len(call.commands)
            out[name] = call.parse(replies[i : i + n])
            i += n
        return out

    return Call(parse, commands=cmds)


def history_reads(model: str, now_s: float, span: int = 1) -> tuple[list[int], Call[list[Any]]]:
    """The finished wait and e2e windows of the last HISTORY_S (2 x 30 HGETALLs per
    partition, summed per window)."""
    last = window_start(now_s) - WINDOW_S  # the current window is still filling
    starts = list(range(window_start(now_s - HISTORY_S), last + 1, WINDOW_S))
    wait = _hists(keys.wait_hist_key, model, starts, span)
    e2e = _hists(keys.e2e_hist_key, model, starts, span)
    n = len(wait.commands)
    both = Call(
        lambda r: [*wait.parse(r[:n]), *e2e.parse(r[n:])],
        commands=[*wait.commands, *e2e.commands],
    )
    return starts, both


def _hists(
    key: Callable[[str, int, int], str], model: str, windows: list[int], span: int
) -> Call[list[Any]]:
    """One histogram hash per window, each the sum of every partition's (ADR 0159)."""
    cmds = [("HGETALL", key(model, w, p)) for p in range(span) for w in windows]

    def parse(r: list[Any]) -> list[Any]:
        out: list[dict[str, str]] = []
        for i in range(len(windows)):
            total: dict[str, int] = {}
            for p in range(span):
                for f, v in (r[p * len(windows) + i] or {}).items():
                    total[f] = total.get(f, 0) + int(v)
            out.append({f: str(v) for f, v in total.items()})
        return out

    return Call(parse, commands=cmds)


def _signals(
    cfg: ModelConfig,
    stats: QueueStats,
    workers: list[WorkerInfo],
    wait: dict[str, Any],
    rates: dict[str, float] | None,
    samples: deque[view.CounterSample],
) -> Signals:
    return Signals(
        queued=stats.queued,
        in_flight=stats.in_flight,
        ready=sum(1 for w in workers if w.state == "ready"),
        starting=sum(1 for w in workers if w.state == "starting"),
        p99_wait_ms=wait["p99_ms"],
        slo_ms=cfg.autoscaling.p99_wait_slo_ms,
        arrived_per_s=rates["arrived"] if rates else None,
        succeeded_per_s=rates["succeeded"] if rates else None,
        queue_growth=view.growth(samples),
    )


def _many(cmds: list[tuple[Any, ...]]) -> Call[list[Any]]:
    return Call(list, commands=cmds)


class DashboardFeed:
    """The JSON the page polls, cached and refreshed by one task at a time."""

    def __init__(
        self,
        r: aioredis.Redis,
        models: dict[str, ModelConfig],
        call: RedisGate,
        *,
        poll_s: float = 1.0,
        cache: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.redis = r
        self.models = models
        self.ops = QueueOps(models)
        self.call = call
        self.poll_s = poll_s
        self.ttl_s = CACHE_SHARE * poll_s if cache else 0.0
        self.clock = clock
        self.wall = wall
        self.refreshes = 0  # how many times Redis was read (tests check the sharing)
        self._cached: dict[str, Any] | None = None
        self._cached_at = 0.0
        self._pending: asyncio.Future[dict[str, Any]] | None = None
        self._samples: dict[str, deque[view.CounterSample]] = {m: deque() for m in models}
        self._dead: dict[str, dict[str, str]] = {}  # job id -> its fields, while shown
        self._history: tuple[float, dict[str, Any]] | None = None

    async def get(self) -> dict[str, Any]:
        if self._cached is not None and self.clock() - self._cached_at < self.ttl_s:
            return self._cached
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._refresh())
            self._pending.add_done_callback(self._done)
        # Shielded: one viewer closing its tab must not cancel the others' refresh.
        return await asyncio.shield(self._pending)

    def _done(self, fut: asyncio.Future[dict[str, Any]]) -> None:
        self._pending = None
        if not fut.cancelled():
            fut.exception()  # retrieved here, raised to every waiter; never "unretrieved"

    async def _refresh(self) -> dict[str, Any]:
        now = self.wall()
        calls = [
            model_reads(self.ops, m, now, cfg.generate is not None)
            for m, cfg in self.models.items()
        ]
        replies = await self.call(run_reads(self.redis, calls))
        self.refreshes += 1
        by_model = dict(zip(self.models, replies, strict=True))
        await self._fetch_dead_details([(m, rd["dead"]) for m, rd in by_model.items()])
        out = {
            "at_ms": int(now * 1000),
            "refresh_s": self.poll_s,
            "models": [self._model(m, rd, now) for m, rd in by_model.items()],
        }
        self._cached, self._cached_at = out, self.clock()
        return out

    async def history(self) -> dict[str, Any]:
        """Latency and completions per finished 10 s window of the last minutes, so a
        page opened now does not start with empty charts (read at most every 10 s)."""
        if self._history is not None and self.clock() - self._history[0] < HISTORY_TTL_S:
            return self._history[1]
        now = self.wall()
        reads = [history_reads(m, now, self.ops.parts.span(m)) for m in self.models]
        replies = await self.call(run_reads(self.redis, [call for _, call in reads]))
        out: dict[str, Any] = {"at_ms": int(now * 1000), "window_s": WINDOW_S, "models": {}}
        for m, (starts, _), hashes in zip(self.models, reads, replies, strict=True):
            n = len(starts)
            out["models"][m] = view.history_points(starts, hashes[:n], hashes[n:], WINDOW_S)
        self._history = (self.clock(), out)
        return out

    async def _fetch_dead_details(self, shown: list[tuple[str, list[str]]]) -> None:
        """Errors of dead letters not seen before: a second round trip only then."""
        wanted = {jid for _, ids in shown for jid in ids}
        self._dead = {k: v for k, v in self._dead.items() if k in wanted}
        missing = [(m, jid) for m, ids in shown for jid in ids if jid not in self._dead]
        if not missing:
            return
        calls = [
            Call(
                lambda r: dict(zip(DEAD_FIELDS, r[0], strict=True)),
                commands=[("HMGET", keys.job_key(m, jid), *DEAD_FIELDS)],
            )
            for m, jid in missing
        ]
        replies = await self.call(run_reads(self.redis, calls))
        for (_, jid), fields in zip(missing, replies, strict=True):
            self._dead[jid] = {k: v for k, v in fields.items() if v is not None}

    def _model(self, name: str, rd: dict[str, Any], now: float) -> dict[str, Any]:
        cfg = self.models[name]
        stats = rd["stats"]
        counters = {k: int(stats.counters.get(k, 0)) for k in view.COUNTERS}
        samples = self._samples.setdefault(name, deque())
        sample = view.CounterSample(now, counters, stats.queued)
        view.add_sample(samples, sample, keep_s=2 * view.GROWTH_SPAN_S)
        rates = view.rates(samples)
        workers, _stale = rd["workers"]
        wait = view.latency(rd["wait"])
        dead_ids = rd["dead"]
        dead_rows = view.dead_letter_rows(dead_ids, [self._dead.get(j, {}) for j in dead_ids])
        return {
            "name": name,
            "handler": cfg.handler,
            "slo_wait_ms": cfg.autoscaling.p99_wait_slo_ms,
            "max_batch": cfg.batching.max_batch,
            "replicas": {"min": cfg.autoscaling.min_replicas, "max": cfg.autoscaling.max_replicas},
            "buckets": [
                {"bucket": b.bucket, "queued": b.queued, "queued_cost": b.queued_cost}
                for b in stats.buckets
            ],
            "queued": stats.queued,
            "queued_cost": stats.queued_cost,
            "in_flight": stats.in_flight,
            "counters": counters,
            "rates": rates,
            "latency": {"span_s": LATENCY_SPAN_S, "wait": wait, "e2e": view.latency(rd["e2e"])},
            "workers": view.workers_view(workers, now),
            "verdict": asdict(verdict(_signals(cfg, stats, workers, wait, rates, samples))),
            "autoscaler": view.autoscaler_view(rd["scale"][0], rd["decisions"][0], now),
            "dead_letters": {"count": stats.dead_lettered, "recent": dead_rows},
            "pause": rd["pause"].as_dict(),
            "generate": view.generate_view(cfg, workers, rd["ttft"]) if "ttft" in rd else None,
            "webhooks": {
                "pending": rd["webhooks"].pending,
                "due": rd["webhooks"].due,
                "oldest_due_s": round(rd["webhooks"].oldest_due_s, 1),
                "dead": rd["webhooks"].dead,
            },
        }
