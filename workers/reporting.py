"""What a worker tells the outside, and the accounts it keeps per batch: its state in
the heartbeat and metrics, the start path once loaded and at the first claim (or a
promotion's latency), and after each batch the service rate, token budget and failure
streak (which the next claim and the quarantine read). A part of
:class:`workers.worker.Worker`, which holds everything named below.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from sluice.config import ModelConfig, SluiceConfig
from sluice.errors import RedisUnavailable
from sluice.jobs import Batch
from workers.budget import BucketServiceMs, FailureStreak, ServiceRate, TokenBudget
from workers.execute import BatchResult
from workers.housekeeping import Housekeeper
from workers.metrics import WorkerMetrics
from workers.parking import Control
from workers.startpath import StartPath
from workers.status import WorkerStatus

if TYPE_CHECKING:
    from workers.handlers.base import Handler
    from workers.worker import WorkerOptions

log = logging.getLogger("sluice.worker")


class Reporting:
    """The worker's reporting and per-batch accounts (a mixin of Worker)."""

    cfg: SluiceConfig
    mcfg: ModelConfig
    opts: WorkerOptions
    handler: Handler
    model: str
    buckets: list[str]
    overlap: bool
    wall: Callable[[], float]
    status: WorkerStatus
    metrics: WorkerMetrics
    start_path: StartPath
    control: Control
    housekeeper: Housekeeper
    budget: TokenBudget
    rate: ServiceRate
    bucket_ms: BucketServiceMs
    streak: FailureStreak
    _first_claim_due: float | None
    _metrics_server: object | None

    @property
    def id(self) -> str:
        return self.status.info.id

    def _report_loaded(self, load_s: float) -> None:
        """The start path and threads in the heartbeat, the metrics and the log."""
        threads = self.handler.cpu_threads()
        extra = {**self.status.snapshot().extra, "start_path": self.start_path.as_dict()}
        if threads is not None:  # in the heartbeat: sluice status, the dashboard, tests
            extra["threads"] = threads
        self.status.update(extra=extra, ready_at=self.wall())
        self.metrics.set_start_path(self.start_path.as_dict())
        log.info(
            "worker %s loaded: model %s on %s (threads %s), buckets %s, in %.1f s: %s",
            self.id,
            self.model,
            self.opts.device,
            "-" if threads is None else threads,
            ",".join(self.buckets),
            load_s,
            self.start_path.summary(),
        )

    def _start_metrics(self) -> None:
        port = self.opts.metrics_port
        if port is None:
            port = self.cfg.worker.metrics_port
        if port < 0:
            return
        bound, self._metrics_server = self.metrics.serve(port)
        self.status.update(metrics_port=bound)

    def _set_state(self, state: str, publish: bool = True, **changes: object) -> None:
        self.status.update(state=state, **changes)
        self.metrics.set_state(state)
        if publish:
            try:
                self.housekeeper.beat()
            except (RedisUnavailable, RedisError, OSError) as e:
                log.warning("could not publish state %s: %s", state, e)

    def _claim_answered(self) -> None:
        """The first claim after ready (or a promotion) answered: the start path's
        last stage, or the promotion's latency (``promote_s`` in the heartbeat)."""
        due, self._first_claim_due = self._first_claim_due, None
        if due is None:
            return
        now = time.monotonic()
        extra = dict(self.status.snapshot().extra)
        promoted_at = self.control.take_promoted_at()
        if promoted_at is not None:
            promote_s = round(now - promoted_at, 4)
            extra["promote_s"] = promote_s
            self.metrics.promote_seconds.labels(self.model).set(promote_s)
            log.info("worker %s promoted: first claim %.3f s after the command", self.id, promote_s)
        elif "first_claim" not in self.start_path.stages:
            self.start_path.add("first_claim", now - due)
            extra["start_path"] = self.start_path.as_dict()
            self.metrics.set_start_path(self.start_path.as_dict())
            log.info("worker %s start path: %s", self.id, self.start_path.summary())
        self.status.update(extra=extra)

    def _account(self, batch: Batch, result: BatchResult) -> None:
        kinds: dict[str, int] = {}
        for o in result.outcomes:
            kinds[o.kind] = kinds.get(o.kind, 0) + 1
        self.metrics.count_jobs(kinds)
        if result.oom_splits:
            self.metrics.oom_total.labels(self.model).inc(result.oom_splits)
            self.budget.on_oom(batch.padded_cost)
        elif not result.failed:
            self.budget.on_success()
        if not result.failed and result.succeeded:
            self.rate.add(batch.cost, result.infer_s)
            self.bucket_ms.add(batch.bucket, len(batch), result.infer_s)
            self.metrics.observe_batch(
                batch.bucket, len(batch), result.padded_tokens, result.real_tokens, result.infer_s
            )
        self.streak.record(result.failed)
        self.metrics.service_rate.labels(self.model).set(self.rate.rate)
        self.metrics.token_budget.labels(self.model).set(self.budget.current)
        info = self.status.snapshot()
        self.status.update(
            batches=info.batches + 1,
            jobs=info.jobs + len(batch),
            batch_size=len(batch),
            failures=info.failures + (1 if result.failed else 0),
            service_rate=self.rate.rate,
            extra={
                **info.extra,  # what the worker set at start (threads) and the held count
                "token_budget": self.budget.current,
                "overlap": self.overlap,
                "padding_efficiency": round(self.metrics.padding_efficiency_value, 4),
                "failure_streak": self.streak.count,
                "handler": self.mcfg.handler,
            },
        )
