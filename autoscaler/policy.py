"""The scaling decision: a pure function of (policy, observation, state, now).

No Redis, no clock, no I/O: the control loop and the offline simulator call the
same :func:`decide`, so a policy replayed against a trace behaves exactly as it
would in production. The replica arithmetic follows the Kubernetes HPA (ratio,
tolerance band, scale-down stabilisation window taking the highest recent
recommendation); the inputs are queue signals, never CPU. Bulk work (ADR 0090) is
weighed after the interactive need, in :mod:`autoscaler.bulk_policy`. Both read the
:class:`~autoscaler.observation.Observation` the loop's reader builds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from autoscaler import bulk_policy, generate_policy, saturation
from autoscaler.observation import Observation
from autoscaler.pool_size import IDLE_NEED, PoolSize
from autoscaler.saturation import Saturation
from sluice.config import AutoscalingConfig, ModelConfig

RECENT_RATE_S = 15.0  # the short arrival-rate window (at most metrics_window_s, the long one)
# The shortest window: read only while parked workers wait (a wrong guess costs a
# promotion and a park, not a cold start).
BURST_RATE_S = 5.0
BURST_WAIT_SHARE = 1.0  # ... and only once the oldest queued job waited this share of the SLO
# A rate is reported once its samples cover this share of its window: a 5 s average
# after a restart is noise, and acting on it would flap.
MIN_RATE_COVERAGE = 0.5

# Bounded reason labels (they become a Prometheus label).
REASONS = (
    "missing-metrics",
    "paused",
    "no-service-rate",
    "steady",
    "load",
    "backlog",
    "tolerance",
    "slo-breach",
    "low-priority-cap",
    "wake",
    "idle",
    "min",
    "max",
    "stabilizing",
    "orphaned-jobs",
    "bulk",
    "bulk-wake",
    "saturated",
    "trend",
    "ttft-breach",
    "pool-wake",
    "burst-over",
)


@dataclass(frozen=True, slots=True)
class PolicyState:
    """What decide() remembers between calls (returned inside each Decision)."""

    recommendations: tuple[tuple[float, int], ...] = ()  # (now_s, replicas) in the window
    last_active_s: float | None = None
    service_rate: float | None = None  # last measured, kept while scaled to zero
    cold_start_s: float | None = None
    # When decide() first ran: a fresh (restarted) autoscaler has no window of history,
    # so it does not scale down before it has watched for one.
    started_s: float | None = None
    saturation: Saturation = field(default_factory=Saturation)  # autoscaler/saturation.py
    # With a warm pool: the count before the latest run of scale-ups (a burst). Down to
    # it the short pool window applies; below it the usual one (docs/adr/0128).
    before_burst: int | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    current: int
    desired: int
    reason: str
    needed: float  # replicas the load and backlog call for, before limits
    state: PolicyState = field(default_factory=PolicyState)
    pool: PoolSize | None = None  # warm_pool.size: auto: this period's size and why

    @property
    def direction(self) -> str:
        if self.desired > self.current:
            return "up"
        return "down" if self.desired < self.current else "none"


def default_service_rate(model: ModelConfig) -> float:
    """Cost units/s of one replica before any is measured: the configured value, else a
    full token-budget batch at the batching block's expected cost per unit."""
    if model.autoscaling.service_rate_cost_per_s is not None:
        return model.autoscaling.service_rate_cost_per_s
    b = model.batching
    batch_ms = b.service_ms_base + b.service_ms_per_cost * b.max_batch_tokens
    return 1000.0 * b.max_batch_tokens / batch_ms


def arrival_s(p: AutoscalingConfig, obs: Observation, cold_s: float) -> float:
    """How soon a replica asked for now serves: a parked one's promotion while the warm
    pool has one (measured, else the configured estimate), else a cold start."""
    if obs.parked > 0:
        return obs.promote_s if obs.promote_s is not None else p.warm_pool.promote_s
    return cold_s


def ahead_rate(p: AutoscalingConfig, obs: Observation, lam: float, cold_s: float) -> float | None:
    """The predictive term (docs/adr/0129): the arrival rate one start-up (cold, or a
    promotion while parked workers wait) plus one period ahead, on the window's trend,
    at most ``max_factor`` times the rate now. None when off, unknown or not rising."""
    slope = obs.arrival_rate_slope
    if not p.predict.enabled or slope is None or slope <= 0 or lam <= 0:
        return None
    lead_s = arrival_s(p, obs, cold_s) + p.period_s
    return min(lam + slope * lead_s, lam * p.predict.max_factor)


def _needed(p: AutoscalingConfig, obs: Observation, mu: float, cold_s: float) -> tuple[float, str]:
    """Replicas for the arrival rate at target utilisation, plus the backlog's drain."""
    lam = obs.arrival_rate_cost or 0.0
    ahead = ahead_rate(p, obs, lam, cold_s)
    recent = obs.arrival_rate_cost_recent or 0.0
    # The short window reacts to a step within seconds, but it is noisy: trust it only
    # while jobs wait and it is more than the ready workers can serve (the queue grows).
    # With parked workers to promote, a wrong guess costs a promotion, not a cold start:
    # trust it once it is clearly above what the ready workers were sized for.
    trusted = obs.ready * mu
    if obs.parked > 0 and obs.oldest_wait_ms > BURST_WAIT_SHARE * p.p99_wait_slo_ms:
        # The oldest job waited past the SLO: the burst is real, not noise.
        trusted *= p.target_utilization * (1.0 + p.tolerance)
        recent = max(recent, obs.arrival_rate_cost_burst or 0.0)
    if recent > lam and recent > trusted and (obs.queued or 0) > 0:
        lam = recent
    backlog = obs.queued_cost or 0.0
    load = lam / (mu * p.target_utilization)
    why = "load"
    if ahead is not None and ahead > lam:
        load, why = ahead / (mu * p.target_utilization), "trend"
    if backlog <= 0:
        return load, why
    spare = obs.ready * mu - lam
    if spare > 0 and backlog / spare <= arrival_s(p, obs, cold_s):
        # The ready workers clear it before a new one could be ready: adding is waste.
        return load, why
    drain = load + backlog / (mu * p.backlog_drain_s)
    if obs.parked > 0:
        # Parked workers serve within a promotion: clear the backlog within about the
        # SLO with as many of them as that takes (never cold starts: a backlog is gone
        # before one would be ready).
        fast_s = max(arrival_s(p, obs, cold_s), p.p99_wait_slo_ms / 1000.0)
        fast = min(load + backlog / (mu * fast_s), float(obs.current + obs.parked))
        drain = max(drain, fast)
    if obs.starting > 0:
        # Capacity is on its way: never fewer than now, and no more if it will do.
        if _starting_suffice(p, obs, mu, lam, backlog, cold_s):
            return max(load, float(obs.current)), "backlog"
        return max(drain, float(obs.current)), "backlog"
    return drain, "backlog"


def _starting_suffice(
    p: AutoscalingConfig, obs: Observation, mu: float, lam: float, backlog: float, cold_s: float
) -> bool:
    """Will the replicas already starting drain the backlog within backlog_drain_s of
    being ready? Then a backlog that grows while they start asks for no more."""
    at_ready = backlog + max(0.0, lam - obs.ready * mu) * cold_s  # at most one cold start
    spare_then = obs.current * mu - lam
    return spare_then > 0 and at_ready / spare_then <= p.backlog_drain_s


def _breach(p: AutoscalingConfig, obs: Observation) -> bool:
    p99 = obs.p99_wait_ms or 0.0
    return (p99 > p.p99_wait_slo_ms and (obs.queued or 0) > 0) or (
        obs.oldest_wait_ms > p.p99_wait_slo_ms
    )


def _pool_wake(p: AutoscalingConfig, obs: Observation, mu: float) -> bool:
    """A burst from idle (docs/adr/0157): the metrics window's rate says the model was
    idle, parked workers wait, and more work is queued than the ready workers clear
    within half the SLO. The whole pool is promoted at once: an idle model's pool is
    sized for one burst from idle, and a wrong guess costs a park, not a cold start."""
    if obs.parked == 0 or not obs.queued:
        return False
    idle = (obs.arrival_rate_cost or 0.0) < IDLE_NEED * mu * p.target_utilization
    clears = max(1, obs.ready) * mu * p.p99_wait_slo_ms / 2000.0
    return idle and (obs.queued_cost or 0.0) > clears


def _orphaned(obs: Observation) -> bool:
    """Jobs are in flight at zero replicas and no registered worker (even a draining one)
    holds them: a crash or reboot left their leases with nobody. Until those leases
    expire no reclaim can requeue them, so nothing would be queued to wake for; a worker
    started now claims them back the moment they do."""
    live = obs.ready + obs.starting + obs.draining
    return obs.current == 0 and obs.in_flight > 0 and live == 0


def _floor(p: AutoscalingConfig, obs: Observation, last_active_s: float, now_s: float) -> int:
    """min_replicas, except that a scale-to-zero model keeps one until idle long enough."""
    if p.min_replicas > 0 or obs.current == 0:
        return p.min_replicas
    idle_s = p.idle_s if p.idle_s is not None else p.scale_down_window_s
    return 0 if now_s - last_active_s >= idle_s else 1


def _want(
    p: AutoscalingConfig, obs: Observation, mu: float, cold_s: float
) -> tuple[int, float, str]:
    """The recommendation before bounds, step limits and stabilisation."""
    cur = obs.current
    if obs.generate is not None:  # slots and time to first token (ADR 0149)
        needed, reason = generate_policy.needed(p, obs, arrival_s(p, obs, cold_s))
    else:
        needed, reason = _needed(p, obs, mu, cold_s)
    want = math.ceil(needed - 1e-9)
    if cur > 0 and want != cur and abs(needed / cur - 1.0) <= p.tolerance:
        want, reason = cur, "tolerance"
    elif want < cur:
        # Land a scale-down a tolerance band below the new count, not at its edge, so
        # ordinary noise does not bounce it straight back up (a flap).
        want = min(cur, math.ceil(needed * (1.0 + p.tolerance) - 1e-9))
    ttft = generate_policy.ttft_breach(p, obs)
    if _breach(p, obs) or ttft:
        # A breach blocks any scale-down; it adds one replica when nothing is starting
        # already and the backlog will not be gone before a new replica is ready (a
        # TTFT breach: whenever jobs wait, since it is measured on admitted jobs).
        if want <= cur and obs.starting == 0 and (reason == "backlog" or ttft):
            want = cur + 1
        want, reason = max(want, cur), "ttft-breach" if ttft else "slo-breach"
    if _pool_wake(p, obs, mu) and want < cur + obs.parked:
        want, reason = cur + obs.parked, "pool-wake"
    cap = p.low_priority_max_replicas
    queued = obs.queued or 0
    if cap is not None and queued > 0 and obs.queued_non_low == 0 and want > max(cap, cur):
        want, reason = max(cap, cur), "low-priority-cap"
    if cur == 0 and queued > 0 and want < 1:
        want, reason = 1, "wake"
    elif want < 1 and _orphaned(obs):
        want, reason = 1, "orphaned-jobs"
    return want, needed, reason


def _bound(p: AutoscalingConfig, want: int, floor: int, reason: str) -> tuple[int, str]:
    if want < floor:
        return floor, "min"
    if want > p.max_replicas:
        return p.max_replicas, "max"
    return want, reason


def _limit_up(p: AutoscalingConfig, cur: int, want: int, parked: int) -> int:
    """A bounded step up; the whole warm pool may be promoted at once (it is started
    already: the limit guards against a storm of cold starts)."""
    step = max(math.ceil(cur * p.scale_up_max_percent / 100.0), p.scale_up_max_step, parked)
    return min(want, cur + step)


def down_window_s(p: AutoscalingConfig, cur: int, before_burst: int | None) -> tuple[float, int]:
    """The scale-down stabilisation window and the count it may go down to. With a warm
    pool, the replicas a burst added go back after the pool's short window (a wrong
    guess costs a promotion); below the count before the burst, the usual window."""
    short = min(p.scale_down_window_s, p.warm_pool.scale_down_window_s)
    if p.warm_pool.enabled and before_burst is not None and cur > before_burst:
        return short, before_burst
    return p.scale_down_window_s, 0


def _burst_base(
    p: AutoscalingConfig, obs: Observation, mu: float, base: int | None, cur: int, desired: int
) -> int | None:
    """The count before the burst a scale-up belongs to (the short pool window's floor),
    or None when it answers no burst. A burst asks for more than the metrics window's
    arrival rate alone calls for (the short rates, a backlog, an SLO breach, the trend).
    A scale-up that rate alone asks for is steady load crossing the tolerance band: it
    keeps the usual window, as without a pool. Given the short one, noise that lifted
    the 60 s rate past the band's edge promoted a worker and parked it again a minute
    after the rate eased (a flap: tests/pure/autoscaler/test_policy.py, seed 695)."""
    if base is not None and cur > base:
        return base  # a burst under way goes on
    steady = math.ceil((obs.arrival_rate_cost or 0.0) / (mu * p.target_utilization) - 1e-9)
    return cur if desired > steady else None


def _burst_over(
    p: AutoscalingConfig, obs: Observation, state: PolicyState, want: int, reason: str
) -> tuple[int, str]:
    """With a warm pool, a burst whose arrivals stopped: none for RECENT_RATE_S, nothing
    queued or in flight. Its replicas go back to the count before it without waiting
    out the pool's window (a step a period): the silence was the stabilisation, and a
    wrong guess costs a promotion (docs/adr/0157). The metrics window's rate, which
    still remembers the burst for a minute, would hold them."""
    if not p.warm_pool.enabled or obs.arrival_rate_cost_recent != 0:
        return want, reason
    if obs.queued or obs.in_flight:
        return want, reason
    cur, base = obs.current, state.before_burst
    if base is not None and base < cur and base < want:
        return base, "burst-over"
    return min(want, cur), reason  # nothing arrives: no scale-up for the minute's rate


def _stabilise_down(
    p: AutoscalingConfig, cur: int, state: PolicyState, now_s: float, reason: str
) -> tuple[int, str]:
    """Down only to the highest recommendation in the window, a bounded step at a time."""
    window, floor = down_window_s(p, cur, state.before_burst)
    if reason == "burst-over":
        window = 0.0  # RECENT_RATE_S of silence was the stabilisation
    # The recommendation made now always counts (a window of 0 holds only it).
    highest = max(w for t, w in state.recommendations if t > now_s - window or t >= now_s)
    watched = now_s - (state.started_s if state.started_s is not None else now_s)
    if highest >= cur or watched < window:
        return cur, "stabilizing"
    return max(highest, cur - p.scale_down_max_step, floor), reason


def _hold_without_rate(p: AutoscalingConfig, obs: Observation, state: PolicyState) -> Decision:
    """No rate yet (just started): hold, but rise to min_replicas and wake for work."""
    cur = obs.current
    if cur < p.min_replicas:
        return Decision(cur, p.min_replicas, "min", float(cur), state)
    if obs.parked > 0 and cur > 0 and cur < p.max_replicas and _breach(p, obs):
        # Jobs already wait past the SLO and warm workers stand by: promoting them
        # costs a park later if it was too many, waiting for a rate costs the SLO.
        desired = min(p.max_replicas, cur + obs.parked)
        return Decision(cur, desired, "slo-breach", float(cur), state)
    wake = cur == 0 and (obs.queued or 0) > 0 and p.max_replicas > 0
    orphans = not wake and _orphaned(obs) and p.max_replicas > 0
    bulk = not (wake or orphans) and bulk_policy.wakes(p, obs)
    reason = (
        "wake"
        if wake
        else "orphaned-jobs"
        if orphans
        else "bulk-wake"
        if bulk
        else "missing-metrics"
    )
    return Decision(cur, 1 if wake or orphans or bulk else cur, reason, float(cur), state)


def _hold_without_service_rate(
    p: AutoscalingConfig, obs: Observation, state: PolicyState
) -> Decision:
    """Nothing measured or configured yet: hold, but wake a sleeping model for work."""
    cur, queued = obs.current, obs.queued or 0
    orphans = queued == 0 and _orphaned(obs)
    bulk = queued == 0 and not orphans and bulk_policy.wakes(p, obs)
    want = 1 if cur == 0 and (queued > 0 or orphans or bulk) else cur
    why = "orphaned-jobs" if orphans else "bulk-wake" if bulk else "no-service-rate"
    desired, reason = _bound(p, want, p.min_replicas, why)
    return Decision(cur, desired, reason, float(want), state)


def _active(p: AutoscalingConfig, obs: Observation) -> bool:
    """Work queued, in flight, arriving, or bulk work that keeps the model up."""
    return (
        (obs.queued or 0) > 0
        or obs.in_flight > 0
        or (obs.arrival_rate_cost or 0) > 0
        or bulk_policy.keeps_active(p, obs)
    )


def _remember(
    p: AutoscalingConfig, obs: Observation, state: PolicyState, last_active: float, now_s: float
) -> PolicyState:
    """The state with this period's activity, service rate (the measured one, else the
    last, else the configured) and cold start (measured, else the last)."""
    measured = obs.service_rate if obs.service_rate and obs.service_rate > 0 else None
    return replace(
        state,
        last_active_s=last_active,
        service_rate=measured or state.service_rate or p.service_rate_cost_per_s,
        cold_start_s=obs.cold_start_s or state.cold_start_s,
        started_s=now_s if state.started_s is None else state.started_s,
    )


def _cap_saturated(
    p: AutoscalingConfig,
    obs: Observation,
    sat: Saturation,
    rec: tuple[int, str],
    floor: int,
    cold_s: float,
    now_s: float,
) -> tuple[int, str, Saturation]:
    """The saturation guard (autoscaler/saturation.py): measure the last scale-up's
    probe, and cap the recommendation (never below the floor) while it proved none."""
    want, reason = rec
    if p.saturation_hold_s <= 0:
        return want, reason, sat
    give_up_s = cold_s + 4 * RECENT_RATE_S  # the new replicas never got ready and ran
    sat = saturation.measure(sat, obs, now_s, RECENT_RATE_S, p.saturation_hold_s, give_up_s)
    cap = sat.capped(now_s)
    if cap is not None and want > max(cap, floor):
        want, reason = max(cap, floor), "saturated"
    return want, reason, sat


def _window(p: AutoscalingConfig, state: PolicyState, now_s: float, want: int) -> PolicyState:
    """The recommendations within the scale-down window, this one added."""
    window = p.scale_down_window_s
    recs = tuple((t, w) for t, w in state.recommendations if t > now_s - window)
    return replace(state, recommendations=(*recs, (now_s, want)))


def _step_up(
    p: AutoscalingConfig, obs: Observation, mu: float, state: PolicyState, want: int, now_s: float
) -> tuple[int, PolicyState]:
    """A bounded step up; it starts a saturation probe, and may begin a burst."""
    cur = obs.current
    desired = _limit_up(p, cur, want, obs.parked)
    sat = state.saturation
    if p.saturation_hold_s > 0:
        sat = saturation.start_probe(sat, obs, cur, desired, now_s)
    base = _burst_base(p, obs, mu, state.before_burst, cur, desired)
    return desired, replace(state, saturation=sat, before_burst=base)


def _step_down(
    p: AutoscalingConfig, cur: int, state: PolicyState, now_s: float, reason: str
) -> tuple[int, str, PolicyState]:
    """A stabilised step down; down to the count before a burst, the burst is undone."""
    desired, reason = _stabilise_down(p, cur, state, now_s, reason)
    if state.before_burst is not None and desired <= state.before_burst:
        state = replace(state, before_burst=None)  # the burst is undone
    return desired, reason, state


def decide(
    policy: AutoscalingConfig, obs: Observation | None, state: PolicyState, now_s: float
) -> Decision:
    """Desired replicas for one model, and why. Never scales down on missing data.

    1. No read: hold. Paused by an operator (ADR 0154): hold, whatever is queued
       (nothing is claimed, so nothing measured now says what it needs). No arrival
       rate yet: hold, but wake a sleeping model for work.
    2. Remember the last activity, service rate and cold start; no service rate at
       all: hold (and wake).
    3. Idle past its idle time, at min_replicas 0: to zero.
    4. The recommendation: the interactive need, then bulk work's, bounded, capped by
       the saturation guard; it joins the scale-down window.
    5. Up a bounded step, down only as the window allows, or steady.
    """
    if obs is None or obs.missing:
        cur = obs.current if obs is not None else 0
        return Decision(cur, cur, "missing-metrics", float(cur), state)
    if obs.paused:
        return Decision(obs.current, obs.current, "paused", float(obs.current), state)
    if obs.arrival_rate_cost is None:
        return _hold_without_rate(policy, obs, state)
    p, cur = policy, obs.current
    active = _active(p, obs)
    last_active = now_s if active or state.last_active_s is None else state.last_active_s
    new_state = _remember(p, obs, state, last_active, now_s)
    mu, cold_s = new_state.service_rate, new_state.cold_start_s or p.cold_start_s
    if mu is None:
        return _hold_without_service_rate(p, obs, new_state)
    floor = _floor(p, obs, last_active, now_s)
    if floor == 0 and not active and cur > 0 and p.min_replicas == 0:
        return Decision(cur, 0, "idle", 0.0, replace(new_state, recommendations=()))
    want, needed, reason = _want(p, obs, mu, cold_s)
    want, needed, reason = bulk_policy.raise_for_bulk(p, obs, mu, want, needed, reason)
    want, reason = _burst_over(p, obs, state, want, reason)
    rec = _bound(p, want, floor, reason)
    want, reason, sat = _cap_saturated(p, obs, state.saturation, rec, floor, cold_s, now_s)
    new_state = replace(_window(p, new_state, now_s, want), saturation=sat)
    if want > cur:
        desired, new_state = _step_up(p, obs, mu, new_state, want, now_s)
        return Decision(cur, desired, reason, needed, new_state)
    if want < cur:
        desired, reason, new_state = _step_down(p, cur, new_state, now_s, reason)
        return Decision(cur, desired, reason, needed, new_state)
    return Decision(cur, cur, reason if reason != "load" else "steady", needed, new_state)
