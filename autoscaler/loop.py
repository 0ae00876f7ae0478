"""The control loop: read, then decide, then act, per model, every period.

One period of one model (:meth:`Autoscaler.decide_one`), each step a collaborator:

1. **upkeep** (:mod:`autoscaler.upkeep`): reclaim the model's expired leases, so
   the read sees their jobs queued again;
2. **read** (:class:`autoscaler.observe.Observer`): one frozen Snapshot, the
   Observation and the live workers, or None when Redis failed;
3. **upkeep**: prune the lapsed workers the read found;
4. **decide** (:func:`autoscaler.policy.decide`): pure; a failed read holds;
5. **act**: record the decision (metrics, one JSON log line, and the
   :class:`autoscaler.decisions.DecisionLog` the dashboard reads), then have the
   backend scale when the decision differs from its count. A failed backend call
   is logged and counted, and the next period tries again.

The loop talks to each backend only through :class:`autoscaler.backends.base.Backend`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from autoscaler import pool_size
from autoscaler.backends.base import Backend
from autoscaler.decisions import DecisionLog
from autoscaler.metrics import AutoscalerMetrics
from autoscaler.observation import Observation
from autoscaler.observe import Observer, Snapshot
from autoscaler.policy import Decision, PolicyState, decide, default_service_rate
from autoscaler.pool_history import PoolHistory
from autoscaler.pool_size import PoolState
from autoscaler.reload import PolicySource
from autoscaler.upkeep import Upkeep
from sluice.errors import SluiceError
from sluice.registry import WorkerInfo

log = logging.getLogger("sluice.autoscaler")


def _log_fields(model: str, d: Decision, obs: Observation | None) -> dict[str, object]:
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 2)

    fields: dict[str, object] = {
        "event": "autoscaler_decision",
        "model": model,
        "current": d.current,
        "desired": d.desired,
        "reason": d.reason,
        "needed": r(d.needed),
    }
    if d.pool is not None:
        fields.update(pool=d.pool.size, pool_reason=d.pool.reason, pool_rise=d.pool.rise)
    if obs is not None:
        fields.update(
            ready=obs.ready,
            starting=obs.starting,
            parked=obs.parked,
            promote_s=r(obs.promote_s),
            arrival_rate_slope=r(obs.arrival_rate_slope),
            start_path=dict(obs.start_path),
            queued=obs.queued,
            queued_cost=r(obs.queued_cost),
            arrival_rate_cost=r(obs.arrival_rate_cost),
            arrival_rate_cost_recent=r(obs.arrival_rate_cost_recent),
            service_rate=r(obs.service_rate),
            p99_wait_ms=obs.p99_wait_ms,
            oldest_wait_ms=r(obs.oldest_wait_ms),
            in_flight=obs.in_flight,
        )
        if obs.generate is not None:
            g = obs.generate
            fields.update(
                slots=g.slots,
                slots_busy=g.slots_busy,
                ttft_p99_ms=g.ttft_p99_ms,
                tokens_per_s=r(g.tokens_per_s),
            )
    return fields


class Autoscaler:
    """Every model's loop. ``upkeep`` and ``decisions`` default to ones on the
    observer's queue client (:func:`autoscaler.service.build` passes its own)."""

    def __init__(
        self,
        source: PolicySource,
        observer: Observer,
        backend: Backend,
        metrics: AutoscalerMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        upkeep: Upkeep | None = None,
        decisions: DecisionLog | None = None,
        pool_history: PoolHistory | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.observer = observer
        self.backend = backend
        self.metrics = metrics or AutoscalerMetrics()
        self.clock = clock
        self.upkeep = upkeep or Upkeep(observer.client, self.metrics)
        # The dashboard reads the latest and recent decisions from Redis.
        self.decisions = decisions or DecisionLog(observer.client.redis)
        # warm_pool.size: auto (ADR 0156): each model's history, read from Redis on its
        # first period (it outlives a restart), and the size last decided.
        self.pool_history = pool_history or PoolHistory(observer.client.redis)
        self.wall = wall
        self.pool_states: dict[str, PoolState] = {}
        self.pool_sizes: dict[str, int] = {}
        self.models = list(source.config.models)
        self.states = {m: PolicyState() for m in self.models}
        self.due = dict.fromkeys(self.models, 0.0)
        self.last: dict[str, Decision] = {}
        # The live workers of each model's latest good read: a failed read holds the
        # count, and the backend keeps seeing the workers it last saw.
        self.workers: dict[str, tuple[WorkerInfo, ...]] = {}

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

    def decide_one(self, model: str, now: float) -> Decision | None:
        """One period of one model; None when the backend's count could not be read."""
        self.upkeep.reclaim(model)
        snap = self.observer.read(model)
        if snap is not None:
            self.upkeep.prune(model, snap.stale_workers)
            self.workers[model] = snap.workers
        workers = list(self.workers.get(model, ()))
        try:
            obs = self._observation(model, snap, workers)
        except SluiceError as e:
            log.warning("autoscaler: %s: cannot read the current replicas (%s): holding", model, e)
            self.metrics.backend_errors.labels(model).inc()
            return None
        d = self._size_pool(model, self._decide(model, obs, now), obs)
        self._record(model, d, obs)
        self._keep_pool(model)
        if d.desired != d.current:
            self._scale(model, d.desired, workers)
        return d

    def _size_pool(self, model: str, d: Decision, obs: Observation) -> Decision:
        """warm_pool.size: auto: this period's need joins the history (a closed minute
        is stored), and the pool is sized from it. A fixed size, a failed read or no
        service rate yet: the decision as it was."""
        p = self.source.policy(model)
        mu = d.state.service_rate
        if not p.warm_pool.auto or obs.missing or mu is None:
            return d
        now = self.wall()
        state = self.pool_states.get(model)
        if state is None:
            state = self.pool_history.load(model, now, p.warm_pool.history_s)
        cold_s = d.state.cold_start_s or p.cold_start_s
        serving = max(0, d.desired)
        room = self.backend.pool_room(model)
        state, size, closed = pool_size.step(p, state, now, obs, mu, cold_s, serving, room)
        self.pool_states[model] = state
        if closed is not None:
            self.pool_history.save(model, closed, p.warm_pool.history_s)
        if size.size != self.pool_sizes.get(model):
            log.info(
                json.dumps(
                    {
                        "event": "autoscaler_pool_size",
                        "model": model,
                        "size": size.size,
                        "reason": size.reason,
                        "rise": size.rise,
                    }
                )
            )
        self.pool_sizes[model] = size.size
        return replace(d, pool=size)

    def _keep_pool(self, model: str) -> None:
        pool = self.source.policy(model).warm_pool
        if pool.auto:
            pool = pool.sized(self.pool_sizes.get(model, pool.start_size))
        try:
            self.backend.keep_pool(model, pool)
        except SluiceError as e:
            log.error("autoscaler: %s: keeping the warm pool failed: %s", model, e)
            self.metrics.backend_errors.labels(model).inc()

    def _observation(
        self, model: str, snap: Snapshot | None, workers: list[WorkerInfo]
    ) -> Observation:
        """The read's Observation with the backend's count (and its cold start, if it
        measures one); without a read, an Observation decide() holds on."""
        self.backend.observe(model, workers)
        current = self.backend.current(model)
        if snap is None:
            return Observation(
                current=current, queued=None, queued_cost=None, arrival_rate_cost=None
            )
        obs = snap.observation
        cold = self.backend.cold_start_s(model)
        return replace(obs, current=current, cold_start_s=cold or obs.cold_start_s)

    def _decide(self, model: str, obs: Observation, now: float) -> Decision:
        cfg = self.source.config.models[model]
        policy = cfg.autoscaling
        if policy.service_rate_cost_per_s is None:
            rate = default_service_rate(cfg)
            policy = policy.model_copy(update={"service_rate_cost_per_s": rate})
        d = decide(policy, obs, self.states[model], now)
        self.states[model] = d.state
        self.last[model] = d
        return d

    def _record(self, model: str, d: Decision, obs: Observation) -> None:
        self.metrics.record(model, d, None if obs.missing else obs.parked)
        self.decisions.record(model, d, obs, self.source.policy(model).period_s)
        log.info(json.dumps(_log_fields(model, d, obs)))

    def _scale(self, model: str, desired: int, workers: list[WorkerInfo]) -> None:
        try:
            self.backend.scale(model, desired, workers)
        except SluiceError as e:
            log.error("autoscaler: %s: scaling to %d failed: %s", model, desired, e)
            self.metrics.backend_errors.labels(model).inc()

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
