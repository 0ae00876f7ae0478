"""``sluice notifier``: claims due webhook deliveries from Redis and sends them.

The notifier is to deliveries what a worker is to jobs: it claims due entries
with a lease (a killed notifier's come due again when the lease lapses, and
another sends them with the same ``webhook-id``), so any number may run side by
side. The hot path never waits for it: the script that ends a job only enqueues
the delivery. Each attempt's status and latency are recorded on the delivery;
what comes next (delivered, a retry at the backoff schedule, given up to the
dead-letter list) is decided by :meth:`Sender._classify`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from notifier.sender import Attempt, Sender, signer
from sluice import fastjson
from sluice.apikeys import KeyRing, load_keyring
from sluice.bulk.ops import BulkState
from sluice.config import SluiceConfig
from sluice.connection import is_cluster
from sluice.errors import ConfigError, RedisUnavailable
from sluice.jobs import JobRecord
from sluice.queue.client import AsyncQueueClient, connect_async
from sluice.webhooks.guard import Guard
from sluice.webhooks.ops import Backlog, Claimed, WebhookOps
from sluice.webhooks.ops import scripts as webhook_scripts
from sluice.webhooks.secret import config_secret

log = logging.getLogger("sluice.notifier")
IDLE_WAIT_S = 0.5  # an idle notifier looks for retries that came due at least this often
METRICS_EVERY_S = 5.0
SPANS_EVERY_S = 30.0  # how often the partition high-water is read
LEASE_MARGIN_S = 5.0  # an attempt ends this long before its lease would lapse
# Due entries one claim looks at, and hosts' lanes it walks, at most: its Redis time
# stays bounded (a millisecond or two) however long a full host's backlog
# (docs/adr/0139).
CLAIM_SCAN = 256
CLAIM_LANES = 64


class SecretBook:
    """The signer for each delivery: its API key's own secret, else the config's."""

    def __init__(self, default: str | None, keyring: KeyRing) -> None:
        try:
            self.default = signer(default) if default else None
        except ValueError as e:
            raise ConfigError(f"webhooks secret: {e}") from e
        self.by_owner = {}
        for k in keyring.keys:
            if k.webhook_secret:
                try:
                    self.by_owner[k.name] = signer(k.webhook_secret)
                except ValueError as e:
                    raise ConfigError(f"auth key {k.name!r}: webhook_secret: {e}") from e

    def for_owner(self, owner: str) -> Any:
        return self.by_owner.get(owner) or self.default


class NotifierMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.attempts = Counter(
            "sluice_webhook_attempts_total",
            "Webhook attempts by result (2xx, 4xx, 5xx, 410, 429, timeout, connect, refused).",
            ["model", "result"],
            registry=r,
        )
        self.deliveries = Counter(
            "sluice_webhook_deliveries_total",
            "Deliveries that ended: delivered, or dead (given up).",
            ["model", "outcome"],
            registry=r,
        )
        self.attempt_seconds = Histogram(
            "sluice_webhook_attempt_seconds",
            "One attempt, connect to response read.",
            ["model"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.delivery_seconds = Histogram(
            "sluice_webhook_delivery_seconds",
            "From the job's end to its delivery (retries included).",
            ["model"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 120, 600, 3600, 86400),
            registry=r,
        )
        self.pending = Gauge(
            "sluice_webhook_pending",
            "Deliveries not yet delivered nor given up.",
            ["model"],
            registry=r,
        )
        self.due = Gauge(
            "sluice_webhook_due", "Deliveries due now and not yet claimed.", ["model"], registry=r
        )
        self.oldest_due = Gauge(
            "sluice_webhook_oldest_due_seconds",
            "How long the oldest due delivery has waited for a notifier.",
            ["model"],
            registry=r,
        )
        self.dead = Gauge(
            "sluice_webhook_dead",
            "Deliveries in the dead-letter list (given up).",
            ["model"],
            registry=r,
        )

    def backlog(self, b: Backlog) -> None:
        self.pending.labels(b.model).set(b.pending)
        self.due.labels(b.model).set(b.due)
        self.oldest_due.labels(b.model).set(b.oldest_due_s)
        self.dead.labels(b.model).set(b.dead)

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        server, _ = start_http_server(port, addr=addr, registry=self.registry)
        return int(server.server_port)


@dataclass
class Notifier:
    """One notifier process's loop (asyncio)."""

    cfg: SluiceConfig
    client: AsyncQueueClient
    secrets_: SecretBook
    guard: Guard
    name: str = ""
    metrics: NotifierMetrics | None = None

    def __post_init__(self) -> None:
        self.name = self.name or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.wcfg = self.cfg.webhooks
        spans = {m: c.queue.partitions for m, c in self.cfg.models.items()}
        self.ops = WebhookOps(list(self.cfg.models), spans)
        self.sender = Sender(self.wcfg, self.guard)
        self.metrics = self.metrics or NotifierMetrics()
        # A lease: twice an attempt's connect + read timeouts, and 5 s. The attempt as a
        # whole ends LEASE_MARGIN_S before the lease would. It never waits for a
        # per-host slot: the claim leases none for a host that has no free one.
        timeouts = self.wcfg.connect_timeout_s + self.wcfg.timeout_s
        self.lease_ms = int((timeouts * 2 + LEASE_MARGIN_S) * 1000)
        self.inflight: set[asyncio.Task[None]] = set()
        self.busy: dict[str, int] = {}  # attempts in flight by host, for the claim
        self.laned: dict[str, bool] = {}  # by model: some host's lane holds deliveries
        self.claims: dict[str, int] = {}  # claim calls made by model (tests count them)
        self._waits: list[asyncio.Task[bool]] = []  # wake waits (BLPOP) still blocked
        self.sent = 0  # attempts made (logged when it stops)
        self._spans_due = 0.0  # monotonic: when to read the partition high-water again

    async def run(self, stopping: Callable[[], bool]) -> None:
        next_metrics = 0.0
        try:
            while not stopping():
                go_on = await self._claim_round()
                if time.monotonic() >= next_metrics:
                    next_metrics = time.monotonic() + METRICS_EVERY_S
                    await self._refresh_metrics()
                if go_on:
                    continue
                if len(self.inflight) >= self.wcfg.max_concurrency:
                    await asyncio.wait(
                        self.inflight, timeout=IDLE_WAIT_S, return_when="FIRST_COMPLETED"
                    )
                else:
                    # With deliveries in a full host's lane, an attempt that ends frees
                    # a slot the next claim fills from it: claim again then too.
                    laned = any(self.laned.values())
                    await self._idle(set(self.inflight) if laned else set())
        finally:
            await self._finish()

    async def _idle(self, attempts: set[asyncio.Task[None]]) -> None:
        """Until a wake token, IDLE_WAIT_S, or one of ``attempts`` ends. A wait still
        blocked when an attempt ends is kept for the next idle, never cancelled: a
        cancelled BLPOP held the loop until its own timeout (0.5 s stalls; a 2,000
        burst to one host drained at about 35/s instead of 240-320/s)."""
        try:
            if not self._waits:
                calls = self.ops.wait(IDLE_WAIT_S, per_model=is_cluster(self.client.redis))
                if len(calls) == 1 and not attempts:
                    await self.client.run(calls[0])
                    return
                self._waits = [asyncio.create_task(self.client.run(c)) for c in calls]
            watched: list[asyncio.Task[Any]] = [*self._waits, *attempts]
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            done = [w for w in self._waits if w.done()]
            self._waits = [w for w in self._waits if not w.done()]
            for w in done:
                w.result()
        except RedisUnavailable as e:
            log.warning("notifier: Redis unavailable (%s); retrying", e)
            await asyncio.sleep(IDLE_WAIT_S)

    async def _claim_round(self) -> bool:
        """Claim for each model, per host (docs/adr/0139); True when a claim says more
        may be leasable now (its batch filled or its look was cut): claim again at
        once. A claim that leased less than it could has looked at all that is due."""
        go_on = False
        every = [(m, p) for m in self.cfg.models for p in range(self.ops.span(m))]
        for model, part in every:
            free = self.wcfg.max_concurrency - len(self.inflight)
            if free <= 0:
                break
            call = self.ops.claim_batch(
                model,
                self.name,
                self.lease_ms,
                free,
                per_host=self.wcfg.per_host_connections,
                busy=self.busy,
                scan=CLAIM_SCAN,
                lanes_max=CLAIM_LANES,
                partition=part,
            )
            self.claims[model] = self.claims.get(model, 0) + 1
            try:
                batch = await self.client.run(call)
            except RedisUnavailable as e:
                log.warning("notifier: cannot claim deliveries of %s: %s", model, e)
                continue
            self.laned[model] = batch.laned
            for c in batch.claimed:
                self._start(c)
            go_on = go_on or batch.more
        return go_on

    def _start(self, c: Claimed) -> None:
        self.busy[c.host] = self.busy.get(c.host, 0) + 1
        started = time.monotonic()
        task = asyncio.create_task(self._deliver(c, started))
        self.inflight.add(task)
        task.add_done_callback(functools.partial(self._ended, c.host))

    def _ended(self, host: str, task: asyncio.Task[None]) -> None:
        self.inflight.discard(task)
        left = self.busy.get(host, 0) - 1
        if left > 0:
            self.busy[host] = left
        else:
            self.busy.pop(host, None)

    async def _finish(self) -> None:
        """Let attempts in flight end (their leases bring back any cut short)."""
        for w in self._waits:
            w.cancel()
        await asyncio.gather(*self._waits, return_exceptions=True)
        if self.inflight:
            await asyncio.wait(self.inflight, timeout=self.wcfg.timeout_s + 1)
            for t in self.inflight:
                t.cancel()
        await self.sender.aclose()

    def _render(self, c: Claimed) -> str:
        """The body: the job (or bulk job) as its GET answers, with the event; a
        result over ``max_result_bytes`` is left out and linked instead. Rendered
        from the record the claim read, the same bytes each time for an ended job."""
        view: dict[str, Any]
        if not c.record:  # the record expired before an attempt was recorded
            view = {"id": c.id, "model": c.model, "record_expired": True}
        elif c.kind == "bulk":
            view = BulkState.from_hash(c.id, c.model, c.record).view()
        else:
            view = JobRecord.from_hash(c.model, {"id": c.id, **c.record}).view()
        view.pop("webhook", None)
        link = f"{self.wcfg.public_url or ''}".rstrip("/") + (
            f"/v1/bulk/{c.id}" if c.kind == "bulk" else f"/v1/jobs/{c.id}"
        )
        if "result" in view and view["result"] is not None:
            size = len(fastjson.dumps(view["result"]))
            if size > self.wcfg.max_result_bytes:
                view["result"] = None
                view["result_omitted"] = {"bytes": size, "url": link}
        payload = {
            "type": f"{'bulk' if c.kind == 'bulk' else 'job'}.{c.event}",
            "timestamp": c.ended_ms / 1000,
            "url": link,
            "data": view,
        }
        return fastjson.dumps(payload)

    async def _deliver(self, c: Claimed, claimed_at: float) -> None:
        assert self.metrics is not None
        try:
            body = c.body or self._render(c)
            wh = self.secrets_.for_owner(c.owner)
            if wh is None:
                a = Attempt("dead", 0, "no signing secret is configured", 0.0, result="refused")
            else:
                # What is left of the lease, less a margin to record the outcome.
                budget = self.lease_ms / 1000 - LEASE_MARGIN_S - (time.monotonic() - claimed_at)
                a = await self.sender.attempt(c, body, wh, budget)
            self.sent += 1
            ok = await self.client.run(
                self.ops.done(
                    c,
                    a.next,
                    retry_ms=a.retry_ms,
                    status=a.status,
                    error=a.error,
                    latency_ms=a.latency_ms,
                    client_error=a.client_error,
                )
            )
        except RedisUnavailable as e:
            log.warning(
                "notifier: delivery %s: Redis unavailable (%s); its lease brings it back", c.id, e
            )
            return
        except Exception:  # one delivery's bug must not end the notifier
            log.exception(
                "notifier: delivery %s failed unexpectedly; its lease brings it back", c.id
            )
            return
        m = self.metrics
        m.attempts.labels(c.model, a.result).inc()
        m.attempt_seconds.labels(c.model).observe(a.latency_ms / 1000)
        if not ok:
            log.info("notifier: delivery %s: lease lost (another notifier has it)", c.id)
        elif a.next == "delivered":
            m.deliveries.labels(c.model, "delivered").inc()
            m.delivery_seconds.labels(c.model).observe(max(0.0, time.time() - c.ended_ms / 1000))
        elif a.next == "dead":
            m.deliveries.labels(c.model, "dead").inc()
            log.warning(
                "notifier: delivery %s given up after %d attempts: %s", c.id, c.attempt, a.error
            )

    async def _refresh_metrics(self) -> None:
        assert self.metrics is not None
        if time.monotonic() >= self._spans_due:
            await self._refresh_spans()
        now_ms = int(time.time() * 1000)
        for model in self.cfg.models:
            try:
                self.metrics.backlog(await self.client.run(self.ops.backlog(model, now_ms)))
            except RedisUnavailable:
                return

    async def _refresh_spans(self) -> None:
        """Deliveries of partitions a larger count left are still claimed (ADR 0160)."""
        self._spans_due = time.monotonic() + SPANS_EVERY_S
        try:
            await self.client.refresh_partitions()
        except RedisUnavailable:
            return
        self.ops.spans.update({m: self.client.ops.parts.span(m) for m in self.cfg.models})


def build(cfg: SluiceConfig, redis_url: str, environ: dict[str, str] | None = None) -> Notifier:
    """A notifier from config; ConfigError for a secret or key file that is wrong."""
    book = SecretBook(config_secret(cfg.webhooks, environ), load_keyring(cfg.auth, environ))
    client = AsyncQueueClient(connect_async(redis_url, timeout_s=10.0), cfg.models)
    client.register(webhook_scripts())
    return Notifier(cfg, client, book, Guard(cfg.webhooks))


def run(cfg: SluiceConfig, redis_url: str, stop: Callable[[], bool]) -> None:
    """The ``sluice notifier`` process: until ``stop()`` is true."""
    # httpx logs each request with its URL at INFO: a URL may carry a receiver's token.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    n = build(cfg, redis_url)
    if n.secrets_.default is None and not n.secrets_.by_owner:
        log.warning(
            "notifier: no signing secret (webhooks.secret_env / secret_file, or an API key's "
            "webhook_secret): the gateway refuses webhooks until one is set"
        )
    if cfg.webhooks.metrics_port and n.metrics is not None:
        port = n.metrics.serve(cfg.webhooks.metrics_port)
        log.info("notifier: metrics on :%d/metrics", port)
    log.info("notifier %s: delivering webhooks of %s", n.name, ", ".join(cfg.models))
    asyncio.run(n.run(stop))
    log.info("notifier %s: stopped (%d attempts)", n.name, n.sent)
