"""The control loop: read, then decide, then act, per model, every period.

The observer reads, :func:`autoscaler.policy.decide` decides, the backend acts.
A failed read holds (decide() sees no observation); a failed backend action is
logged and counted and retried next period. One structured log line per
decision.

Before each read the loop reclaims the model's expired leases: otherwise only a
worker's claim does, and a model at zero workers would keep them ``running``
forever (nothing queued, so nothing wakes it).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import redis

from autoscaler.backends.base import Backend
from autoscaler.decisions import DecisionLog
from autoscaler.metrics import AutoscalerMetrics
from autoscaler.observe import Observer
from autoscaler.policy import Decision, Observation, PolicyState, decide, default_service_rate
from autoscaler.reload import PolicySource
from sluice.backoff import Reconnect
from sluice.errors import SluiceError
from sluice.queue.client import REDIS_ERRORS

log = logging.getLogger("sluice.autoscaler")


def _log_fields(model: str, d: Decision, obs: Observation | None) -> dict[str, object]:
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 2)

    fields: dict[str, object] = {
        "event": "autoscaler_decision", "model": model, "current": d.current,
        "desired": d.desired, "reason": d.reason, "needed": r(d.needed),
    }  # fmt: skip
    if obs is not None:
        fields.update(
            ready=obs.ready, starting=obs.starting, queued=obs.queued,
            queued_cost=r(obs.queued_cost), arrival_rate_cost=r(obs.arrival_rate_cost),
            arrival_rate_cost_recent=r(obs.arrival_rate_cost_recent),
            service_rate=r(obs.service_rate), p99_wait_ms=obs.p99_wait_ms,
            oldest_wait_ms=r(obs.oldest_wait_ms), in_flight=obs.in_flight,
        )  # fmt: skip
    return fields


class Autoscaler:
    def __init__(self, source: PolicySource, observer: Observer, backend: Backend,
                 metrics: AutoscalerMetrics | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.source = source
        self.observer = observer
        self.backend = backend
        self.metrics = metrics or AutoscalerMetrics()
        self.clock = clock
        self.models = list(source.config.models)
        self.states = {m: PolicyState() for m in self.models}
        self.due = dict.fromkeys(self.models, 0.0)
        self.last: dict[str, Decision] = {}
        # The dashboard reads the latest and recent decisions from Redis.
        r = getattr(getattr(observer, "client", None), "redis", None)
        self.decision_log = DecisionLog(r) if r is not None else None
        # One log line per Redis outage per model, not one per period (ADR 0065).
        self.outages = {m: Reconnect(log, f"autoscaler: {m}: reclaim") for m in self.models}

    def step(self, now_s: float | None = None) -> dict[str, Decision]:
        """Decide for every model whose period is due; returns those decisions."""
        now = self.clock() if now_s is None else now_s
        self.source.check()
        self.backend.tick(now)
        out = {}
        for model in self.models:
            if now < self.due[model] or model not in self.source.config.models:
                continue
            self.due[model] = now + self.source.policy(model).period_s
            d = self.decide_one(model, now)
            if d is not None:
                out[model] = d
        return out

    def _reclaim(self, model: str) -> int | None:
        """Requeue (or dead-letter) the model's expired leases; None if Redis failed.
        A failure only loses this period's reclaim: the read that follows decides."""
        outage = self.outages.get(model) or self.outages.setdefault(
            model, Reconnect(log, f"autoscaler: {model}: reclaim"))  # fmt: skip
        try:
            n = self.observer.client.reclaim(model)
        except (SluiceError, redis.RedisError, *REDIS_ERRORS) as e:
            outage.failed(e)  # the period is the retry interval; the delay is unused
            self.metrics.reclaim_errors.labels(model).inc()
            return None
        outage.ok()
        if n:
            self.metrics.reclaimed.labels(model).inc(n)
            log.info(json.dumps({"event": "autoscaler_reclaimed", "model": model,
                                 "reclaimed": n}))  # fmt: skip
        return n

    def _observe(self, model: str) -> Observation | None:
        obs = self.observer.read(model, 0)
        workers = self.observer.last_workers.get(model, [])
        note = getattr(self.backend, "observe", None)
        if note is not None:
            note(model, workers)
        current = self.backend.current(model)
        if obs is None:
            return Observation(current=current, queued=None, queued_cost=None,
                               arrival_rate_cost=None)  # fmt: skip
        measured = getattr(self.backend, "cold_start_s", None)
        cold = measured(model) if measured is not None else None
        return replace(obs, current=current, cold_start_s=cold or obs.cold_start_s)

    def decide_one(self, model: str, now: float) -> Decision | None:
        self._reclaim(model)
        try:
            obs = self._observe(model)
        except SluiceError as e:
            log.warning("autoscaler: %s: cannot read the current replicas (%s): holding", model, e)
            self.metrics.backend_errors.labels(model).inc()
            return None
        cfg = self.source.config.models[model]
        policy = cfg.autoscaling
        if policy.service_rate_cost_per_s is None:
            rate = default_service_rate(cfg)
            policy = policy.model_copy(update={"service_rate_cost_per_s": rate})
        d = decide(policy, obs, self.states[model], now)
        self.states[model] = d.state
        self.last[model] = d
        self.metrics.record(model, d)
        if self.decision_log is not None:
            self.decision_log.record(model, d, obs, self.source.policy(model).period_s)
        log.info(json.dumps(_log_fields(model, d, obs)))
        if d.desired != d.current:
            try:
                self.backend.scale(model, d.desired, self.observer.last_workers.get(model, []))
            except SluiceError as e:
                log.error("autoscaler: %s: scaling to %d failed: %s", model, d.desired, e)
                self.metrics.backend_errors.labels(model).inc()
        return d

    def run(self, stop: threading.Event, tick_s: float = 0.5) -> None:
        """Until ``stop`` is set; the backend is closed (workers drained) on the way out."""
        try:
            while not stop.is_set():
                try:
                    self.step()
                except Exception:  # noqa: BLE001 - one bad period must not stop scaling
                    log.exception("autoscaler: step failed; trying again next period")
                stop.wait(tick_s)
        finally:
            self.backend.close()
