"""The warm pool's size when ``warm_pool.size: auto`` (docs/adr/0156): pure, clock passed in.

A parked worker is there for load that rises faster than a cold start: what the
pool must hold is how much the need (replicas the arrival rate calls for at the
target utilisation) rose within one cold start. Every period :func:`observe` adds
the need; each minute keeps its largest rise (the need now minus the lowest need
within one cold start before), and, apart, the largest rise that began from idle
(need under half a replica). :func:`size` reads the history window's minutes at a
high percentile and bounds the answer:

- ``max_replicas``: never more parked workers than could still be promoted;
- ``room``: the cores or devices free to promote into, where the backend knows them;
- the cost cap: parked workers at ``cost_fraction`` cost at most
  ``max_cost_fraction`` of the serving fleet's mean over the window.

While the model is idle (need under half a replica, at its floor) the size is read
from the rises that began from idle alone: what one burst from idle needs, so an
idle model's pool costs what its next wake-up takes, not its busiest hour.

Until the history covers ``history_min_s`` the size is ``initial_size`` (else one
parked worker per serving one). The closed minutes are small records
(:class:`sluice.records.PoolMinute`) that the loop keeps in Redis
(:mod:`autoscaler.pool_history`), so a restarted autoscaler sizes from them at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from autoscaler.observation import Observation
from sluice.config import AutoscalingConfig
from sluice.records import PoolMinute

MINUTE_S = 60.0
IDLE_NEED = 0.5  # replicas: under this the model is idle (less than half a replica busy)

# Bounded labels (the decision log and the metric say which bound set the size).
POOL_REASONS = ("fixed", "initial", "history", "idle", "max-replicas", "room", "cost-cap")


@dataclass(frozen=True, slots=True)
class PoolState:
    """The history :func:`observe` keeps: closed minutes, the open one, and the needs
    seen within the last cold start (what a rise is measured against)."""

    minutes: tuple[PoolMinute, ...] = ()
    open: PoolMinute | None = None
    # (now_s, need, serving) within one cold start
    recent: tuple[tuple[float, float, int], ...] = ()


@dataclass(frozen=True, slots=True)
class PoolSize:
    size: int
    reason: str  # one of POOL_REASONS
    rise: float  # the history's rise at the percentile (replicas); 0 without history


def need(p: AutoscalingConfig, rate_cost: float | None, mu: float) -> float:
    """Replicas an arrival rate (cost units/s) needs at the target utilisation."""
    return (rate_cost or 0.0) / (mu * p.target_utilization) if mu > 0 else 0.0


def observe(
    state: PoolState, now_s: float, need_now: float, serving: int, cold_s: float, share: float
) -> tuple[PoolState, PoolMinute | None]:
    """The history with this period's need; the minute it closed, if one did (the
    caller stores it). ``share``: target / burst utilisation (a bridge's replicas per
    replica of need)."""
    recent = tuple(x for x in state.recent if x[0] >= now_s - cold_s)
    low = min((n for _, n, _ in recent), default=need_now)
    fleet = min((s for _, _, s in recent), default=serving)
    rise = max(0.0, need_now * share - fleet)
    idle_rise = rise if low < IDLE_NEED else 0.0
    start = math.floor(now_s / MINUTE_S) * MINUTE_S
    cur, closed = state.open, None
    if cur is not None and cur.start_s != start:
        closed, cur = cur, None
    if cur is None:
        cur = PoolMinute(start, rise, idle_rise, float(serving), 1)
    else:
        cur = PoolMinute(
            start,
            max(cur.rise, rise),
            max(cur.idle_rise, idle_rise),
            cur.serving_sum + serving,
            cur.periods + 1,
        )
    minutes = state.minutes if closed is None else (*state.minutes, closed)
    new = PoolState(minutes, cur, (*recent, (now_s, need_now, serving)))
    return new, closed


def forget(state: PoolState, now_s: float, history_s: float) -> PoolState:
    """Drop the minutes older than the window."""
    kept = tuple(m for m in state.minutes if m.start_s >= now_s - history_s)
    return state if len(kept) == len(state.minutes) else replace(state, minutes=kept)


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _covered_s(state: PoolState, now_s: float) -> float:
    first = state.minutes[0].start_s if state.minutes else None
    return 0.0 if first is None else now_s - first


def _bound(
    p: AutoscalingConfig, want: int, reason: str, mean_serving: float, cur: int, room: int | None
) -> PoolSize:
    wp = p.warm_pool
    size, why = want, reason
    promotable = max(0, p.max_replicas - cur)
    if size > promotable:
        size, why = promotable, "max-replicas"
    if room is not None and size > room:
        size, why = max(0, room), "room"
    if wp.cost_fraction > 0:
        afford = math.floor(wp.max_cost_fraction * max(1.0, mean_serving) / wp.cost_fraction + 1e-9)
        if size > afford:
            size, why = afford, "cost-cap"
    return PoolSize(size, why, 0.0)


def size(
    p: AutoscalingConfig,
    state: PoolState,
    now_s: float,
    cur: int,
    need_now: float,
    room: int | None = None,
) -> PoolSize:
    """The pool's size for this period (``cur``: serving replicas now)."""
    wp = p.warm_pool
    if not wp.auto:
        return PoolSize(wp.start_size, "fixed", 0.0)
    minutes = list(state.minutes)
    if _covered_s(state, now_s) < wp.history_min_s or not minutes:
        want = wp.initial_size if wp.initial_size is not None else max(1, cur)
        return _bound(p, want, "initial", float(max(1, cur)), cur, room)
    serving = sum(m.serving_sum for m in minutes) / max(1, sum(m.periods for m in minutes))
    idle_rises = [m.idle_rise for m in minutes if m.idle_rise > 0]
    if need_now < IDLE_NEED and idle_rises:
        rise, why = percentile(idle_rises, wp.percentile), "idle"
    else:
        rise, why = percentile([m.rise for m in minutes], wp.percentile), "history"
    bounded = _bound(p, math.ceil(rise - 1e-9), why, serving, cur, room)
    return replace(bounded, rise=round(rise, 2))


def step(
    p: AutoscalingConfig,
    state: PoolState,
    now_s: float,
    obs: Observation,
    mu: float,
    cold_s: float,
    serving: int,
    room: int | None = None,
) -> tuple[PoolState, PoolSize, PoolMinute | None]:
    """One period: the history with this period's need (the short arrival rate, else
    the window's), the pool's size for ``serving`` replicas, and the minute that
    closed, if one did (the loop stores it)."""
    rate = obs.arrival_rate_cost_recent
    n = need(p, obs.arrival_rate_cost if rate is None else rate, mu)
    share = p.target_utilization / max(p.target_utilization, p.warm_pool.burst_utilization)
    state, closed = observe(state, now_s, n, serving, cold_s, share)
    state = forget(state, now_s, p.warm_pool.history_s)
    return state, size(p, state, now_s, serving, n, room), closed
