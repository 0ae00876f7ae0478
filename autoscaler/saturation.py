"""The saturation guard: stop adding replicas that do not add drain rate.

Replicas that share what limits them (CPU cores, one GPU, a throttled node) can
serve less together than fewer of them did: on a 2-core machine a second CPU
worker of two threads took the model from 88 to 39 requests/s. The policy's
arithmetic assumes each replica adds its service rate, so left alone it would
keep adding. This guard measures instead (docs/adr/0126):

1. When the policy scales up while jobs wait and every replica is ready, it
   records a :class:`Probe`: the ready count and the recent completion rate,
   which with a backlog is what those replicas can drain.
2. Once at least the replicas asked for are ready and their count has held for
   ``settle_s`` (the recent rate's window, so it covers only that count) with
   jobs still waiting, it compares. A gain below ``MIN_GAIN`` of what the added
   replicas should have brought (per replica, what the old ones drained each)
   caps the model at the old count if the rate fell, else at the count it
   measured. Scale-ups go on while a probe waits (a burst is not slowed by it);
   the cap stops the ones after.
3. The cap holds for ``hold_s`` (then the next scale-up measures again). The
   probe is dropped, measuring nothing, if the backlog empties first (no
   backlog, no capacity reading) or the replicas never get ready.

Pure: the state goes in and comes out, like the rest of the policy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autoscaler.observation import Observation

MIN_GAIN = 0.25  # of the rate the added replicas should have brought


@dataclass(frozen=True, slots=True)
class Probe:
    ready: int  # replicas ready (all of them) when the scale-up was decided
    rate: float  # their recent completion rate, cost units/s, with jobs waiting
    target: int  # replicas asked for
    decided_s: float
    seen: int = 0  # ready replicas at the last look, once at least ``target``
    stable_s: float | None = None  # since when ``seen`` has not changed


@dataclass(frozen=True, slots=True)
class Saturation:
    probe: Probe | None = None
    cap: int | None = None  # at most this many replicas while now < until_s
    until_s: float = 0.0
    why: str = ""  # what was measured, for the decision log

    def capped(self, now_s: float) -> int | None:
        return self.cap if self.cap is not None and now_s < self.until_s else None


def _waiting(obs: Observation) -> bool:
    return (obs.queued or 0) > 0


def measure(
    sat: Saturation,
    obs: Observation,
    now_s: float,
    settle_s: float,
    hold_s: float,
    give_up_s: float,
) -> Saturation:
    """Advance a pending probe by one observation; may set the cap."""
    if sat.cap is not None and now_s >= sat.until_s:
        sat = replace(sat, cap=None, why="")
    p = sat.probe
    if p is None:
        return sat
    rate = obs.completion_rate_cost_recent
    if not _waiting(obs) or now_s - p.decided_s > give_up_s:
        return replace(sat, probe=None)  # nothing to measure against
    if obs.ready < p.target:
        return sat if p.stable_s is None else replace(sat, probe=replace(p, seen=0, stable_s=None))
    if obs.ready != p.seen or p.stable_s is None:  # more came (another step): settle again
        return replace(sat, probe=replace(p, seen=obs.ready, stable_s=now_s))
    if now_s - p.stable_s < settle_s or rate is None:
        return sat
    expected = p.rate / p.ready * (obs.ready - p.ready)
    gain = rate - p.rate
    if gain >= MIN_GAIN * expected:
        return replace(sat, probe=None)  # it helped: carry on
    cap = p.ready if gain < 0 else obs.ready
    why = f"drain rate {p.rate:.0f} -> {rate:.0f} cost/s going {p.ready} -> {obs.ready} replicas"
    return Saturation(None, cap, now_s + hold_s, why)


def start_probe(
    sat: Saturation, obs: Observation, current: int, desired: int, now_s: float
) -> Saturation:
    """Record a probe for a scale-up decided now, when it can be measured."""
    rate = obs.completion_rate_cost_recent
    if (
        sat.probe is not None
        or desired <= current
        or not _waiting(obs)
        or obs.ready == 0
        or obs.ready != current
        or not rate
    ):
        return sat
    return replace(sat, probe=Probe(obs.ready, rate, desired, now_s))
