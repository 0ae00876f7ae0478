"""Controllers the simulator can drive: Sluice's policy, three baselines, an oracle.

Each is ``decide(obs, now_s) -> Decision`` with its own state. Sluice's wraps the
pure :func:`autoscaler.policy.decide`; the baselines model what other autoscalers
do with the same observations, so a replay compares them side by side.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from autoscaler import pool_size
from autoscaler.observation import Observation
from autoscaler.policy import Decision, PolicyState, decide
from autoscaler.pool_size import PoolState
from sluice.config import AutoscalingConfig
from sluice.errors import ConfigError


class Controller(Protocol):
    name: str

    def decide(self, obs: Observation, now_s: float) -> Decision: ...


@dataclass
class SluicePolicy:
    policy: AutoscalingConfig
    name: str = "sluice"
    state: PolicyState = field(default_factory=PolicyState)

    # warm_pool.size: auto: the pool's history (a bench may hand in an earlier run's).
    pool: PoolState = field(default_factory=PoolState)

    def decide(self, obs: Observation, now_s: float) -> Decision:
        d = decide(self.policy, obs, self.state, now_s)
        self.state = d.state
        mu = d.state.service_rate
        if not self.policy.warm_pool.auto or mu is None:
            return d
        cold_s = d.state.cold_start_s or self.policy.cold_start_s
        self.pool, size, _ = pool_size.step(
            self.policy, self.pool, now_s, obs, mu, cold_s, max(0, d.desired)
        )
        return replace(d, pool=size)


@dataclass
class Fixed:
    replicas: int
    name: str = "fixed"

    def decide(self, obs: Observation, now_s: float) -> Decision:
        return Decision(obs.current, self.replicas, "fixed", float(self.replicas))


def _clamp(p: AutoscalingConfig, n: int) -> int:
    return max(p.min_replicas, min(p.max_replicas, n))


@dataclass
class QueueLength:
    """KEDA/HPA-like: queued jobs / target per replica, tolerance 10%, 300 s down window."""

    policy: AutoscalingConfig
    target: float = 5.0
    down_window_s: float = 300.0
    name: str = "queue-length"
    recs: list[tuple[float, int]] = field(default_factory=list)

    def decide(self, obs: Observation, now_s: float) -> Decision:
        cur, queued = obs.current, obs.queued or 0
        want = math.ceil(queued / self.target)
        if cur > 0 and abs(queued / (self.target * cur) - 1) <= 0.1:
            want = cur
        want = _clamp(self.policy, max(want, 1 if queued > 0 else 0))
        self.recs = [(t, w) for t, w in self.recs if t > now_s - self.down_window_s]
        self.recs.append((now_s, want))
        if want > cur:
            desired = min(want, cur + max(cur, 4))  # HPA default: +100% or +4
        else:
            desired = min(cur, max(w for _, w in self.recs))
        return Decision(cur, desired, "queue-length", queued / self.target)


@dataclass
class Ongoing:
    """Ray Serve-like: ongoing requests (queued + running) / 2 per replica, acted on only
    after it held for 30 s (up) or 600 s (down)."""

    policy: AutoscalingConfig
    target: float = 2.0
    up_delay_s: float = 30.0
    down_delay_s: float = 600.0
    name: str = "ongoing"
    above_since: float | None = None
    below_since: float | None = None

    def decide(self, obs: Observation, now_s: float) -> Decision:
        cur = obs.current
        ongoing = (obs.queued or 0) + obs.in_flight
        want = _clamp(self.policy, math.ceil(ongoing / self.target))
        desired = cur
        if cur == 0 and want > 0:
            desired = want  # Ray scales up from zero at once
        elif want > cur:
            self.above_since = self.above_since if self.above_since is not None else now_s
            if now_s - self.above_since >= self.up_delay_s:
                desired, self.above_since = want, None
        elif want < cur:
            self.below_since = self.below_since if self.below_since is not None else now_s
            if now_s - self.below_since >= self.down_delay_s:
                desired, self.below_since = want, None
        if want <= cur:
            self.above_since = None
        if want >= cur:
            self.below_since = None
        return Decision(cur, desired, "ongoing", ongoing / self.target)


@dataclass
class Oracle:
    """Knows the trace: asks for what the rate will need once a new replica is ready."""

    schedule: Callable[[float], int]
    lead_s: float
    name: str = "oracle"

    def decide(self, obs: Observation, now_s: float) -> Decision:
        n = self.schedule(now_s + self.lead_s)
        return Decision(obs.current, n, "oracle", float(n))


def parse_policy(spec: str, policy: AutoscalingConfig) -> Controller:
    """``sluice`` (the config's policy), ``fixed:N``, ``queue-length[:T]``, ``ongoing[:T]``."""
    name, _, arg = spec.partition(":")
    try:
        if name == "sluice":
            return SluicePolicy(policy)
        if name == "fixed":
            return Fixed(int(arg), name=spec)
        if name == "queue-length":
            return QueueLength(policy, float(arg or 5.0))
        if name == "ongoing":
            return Ongoing(policy, float(arg or 2.0))
    except ValueError as e:
        raise ConfigError(f"--policy {spec!r}: bad number: {e}") from e
    raise ConfigError(
        f"--policy {spec!r}: use sluice, fixed:N, queue-length[:TARGET] or ongoing[:TARGET]"
    )
