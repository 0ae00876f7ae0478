"""Everything one gateway process holds: config, Redis clients, estimators, tasks.

The gateway keeps no job state of its own: any number of them can stand behind
one load balancer, all reading and writing the same Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import redis.asyncio as aioredis
import uvicorn

from gateway.event_hub import EventHub
from gateway.generate_service import Codecs
from gateway.metrics import GatewayMetrics
from gateway.read_batch import ReadBatch
from gateway.redis_io import RedisGate, connect
from gateway.snapshots import Snapshots
from gateway.submit_batch import SubmitBatch
from gateway.token_hub import TokenHub
from gateway.waiters import JobWaiters
from gateway.webhooks import WebhookPolicy
from sluice import keys
from sluice.bulk.ops import BulkOps
from sluice.bulk.ops import scripts as bulk_scripts
from sluice.bulk.rq_jobs import RqEnqueuer, rq_url
from sluice.config import ModelConfig, SluiceConfig, resolve_redis_url
from sluice.config.models import MAX_PARTITIONS
from sluice.cost import CostEstimator
from sluice.errors import ConfigError, UnknownModel
from sluice.queue import AsyncQueueClient
from sluice.webhooks.ops import WebhookOps
from sluice.webhooks.ops import scripts as webhook_scripts

log = logging.getLogger("sluice.gateway")


class GatewayState:
    def __init__(
        self,
        cfg: SluiceConfig,
        redis_url: str | None = None,
        *,
        redis: aioredis.Redis | None = None,
        pubsub_redis: aioredis.Redis | None = None,
    ) -> None:
        self.cfg = cfg
        self.gw = cfg.gateway
        self.timeout_s = cfg.gateway.redis_timeout_s
        url = resolve_redis_url(redis_url, cfg)
        self.redis = (
            redis
            if redis is not None
            else connect(url, self.timeout_s, max_connections=cfg.gateway.redis_max_connections)
        )
        self.pubsub_redis = (
            pubsub_redis
            if pubsub_redis is not None
            else redis
            if redis is not None
            else connect(url, self.timeout_s, blocking_reads=True)
        )
        models = dict(cfg.models)
        self.call = RedisGate(self.timeout_s, cfg.gateway.redis_max_connections)
        self.queue = AsyncQueueClient(self.redis, models)
        self.reads = ReadBatch(self.redis, self.call)  # job reads of one turn: one round trip
        # Submits of one turn: one script call per model, key and limits (ADR 0161).
        self.submits = SubmitBatch(self.queue.ops, lambda c: self.call(self.queue.run(c)))
        # Tokenizers load once per process, here, not on the first request.
        self.estimators = {name: CostEstimator(m) for name, m in models.items()}
        # Generative models' prompt codecs: loaded by start() (a chat template and a
        # tokenizer per model; no torch in the gateway).
        self.codecs = Codecs()
        self.metrics = GatewayMetrics()
        self.snapshots = Snapshots(self.redis, models, self.metrics, self.call)
        self.snapshots.ops.parts = self.queue.ops.parts  # one partition high-water (ADR 0160)
        self.waiters = JobWaiters(
            self.pubsub_redis,
            [keys.done_channel(m) for m in models],
            reads=self.redis,
            timeout_s=self.timeout_s,
        )
        self._stream_hubs(url, redis)
        self._tasks: list[asyncio.Task[Any]] = []
        self._bulk_and_webhooks(url, injected=redis is not None)

    def _stream_hubs(self, url: str, redis: aioredis.Redis | None) -> None:
        """Model event streams and generative token streams: their blocking reads on a
        client of their own, at most one connection per watched model (and, for event
        streams, per partition: up to MAX_PARTITIONS while a lowered count's
        partitions drain) for each (two while a stopped reader lets go)."""
        cfg = self.cfg
        per_model = 2 * MAX_PARTITIONS + 2
        self.events_redis = (
            redis
            if redis is not None
            else connect(url, self.timeout_s, max_connections=per_model * len(cfg.models))
        )
        self.events = EventHub(
            self.events_redis,
            reads=self.redis,
            call=self.call,
            max_viewers=cfg.gateway.model_events_max_viewers,
            timeout_s=self.timeout_s,
            metrics=self.metrics,
            span=self.queue.ops.parts.span,
        )
        self.tokens = TokenHub(
            self.events_redis, reads=self.redis, call=self.call, timeout_s=self.timeout_s
        )

    def _bulk_and_webhooks(self, url: str, *, injected: bool) -> None:
        """Their scripts on the queue client, their Redis operations and policies."""
        cfg = self.cfg
        self.queue.register(bulk_scripts())
        self.queue.register(webhook_scripts())
        self.queue.ops.hook_ttl_s = cfg.webhooks.record_ttl_s
        self.webhooks = WebhookPolicy(cfg.webhooks)
        self.deliveries = WebhookOps(list(cfg.models))
        self.bulk = BulkOps(list(cfg.models), cfg.bulk.ttl_s)
        # Queues a bulk job's first coordinator slice on RQ (None with injected clients:
        # tests; a bulk worker's reaper then starts it).
        self.bulk_enqueue: Callable[[str], Any] | None = None if injected else RqEnqueuer(cfg, url)
        # Why bulk uploads are refused here (RQ pointed at a cluster), or None.
        self.bulk_refused: str | None = None
        try:
            rq_url(cfg, url)
        except ConfigError as e:
            self.bulk_refused = str(e)

    def model(self, name: str) -> ModelConfig:
        cfg = self.cfg.models.get(name)
        if cfg is None:
            raise UnknownModel(f"unknown model {name!r}")
        return cfg

    async def start(self) -> None:
        self._close_waiters_on_exit_signals()
        with contextlib.suppress(Exception):  # Redis may be down at start: readyz says so
            await self.snapshots.refresh()
        await self.codecs.load_all(self.cfg.models)  # a failure: readyz says so
        self._tasks = [
            asyncio.create_task(self.waiters.run(), name="sluice-completions"),
            asyncio.create_task(
                self.snapshots.run(self.gw.stats_refresh_s), name="sluice-snapshots"
            ),
        ]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.timeout_s):
                await self.waiters.connected.wait()

    def _close_waiters_on_exit_signals(self) -> None:
        """Under uvicorn, SIGTERM/SIGINT first end every long-poll (503, retry), then
        uvicorn's own handler starts its graceful shutdown.

        uvicorn waits for open requests before the lifespan's shutdown runs, so that
        is too late: long-polls would hold the shutdown for its whole timeout and
        then be cut. Only uvicorn's handler is chained (found by its bound Server);
        uvicorn restores the original handlers when it exits.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            prev = signal.getsignal(sig)
            if not isinstance(getattr(prev, "__self__", None), uvicorn.Server):
                continue

            def handler(signum: int, frame: FrameType | None, prev: Any = prev) -> None:
                loop.call_soon_threadsafe(self._closing, signum)
                prev(signum, frame)

            signal.signal(sig, handler)

    def _closing(self, signum: int) -> None:
        n = self.waiters.close()
        streams = self.events.close() + self.tokens.close()
        log.info(
            "%s: ended %d long-poll(s) (503, retry) and %d model event stream(s) "
            "before shutting down",
            signal.Signals(signum).name,
            n,
            streams,
        )

    async def stop(self) -> None:
        await self.events.stop()
        await self.tokens.stop()
        for t in self._tasks:
            t.cancel()
        if self._tasks:  # bounded: a shutdown never hangs on a stuck connection
            await asyncio.wait(self._tasks, timeout=self.timeout_s)
        clients = {id(c): c for c in (self.redis, self.pubsub_redis, self.events_redis)}
        for client in clients.values():
            with contextlib.suppress(Exception):
                await client.aclose()

    async def ping(self) -> bool:
        try:
            return bool(await self.call(self.redis.ping()))
        except Exception:
            return False
