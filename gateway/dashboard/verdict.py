"""Is a model keeping up? One word, a level and the reason, from the dashboard's numbers.

Pure: the feed gathers the signals, this decides; the page only shows the result.
Checked in order, the first that holds wins: work with nobody to do it, a
queue-wait SLO breach, a growing queue with arrivals outpacing completions,
no traffic at all, else keeping up.
"""

from __future__ import annotations

from dataclasses import dataclass

BEHIND_RATIO = 1.1  # arrivals this much above completions, with a growing queue


@dataclass(frozen=True, slots=True)
class Signals:
    queued: int
    in_flight: int
    ready: int
    starting: int
    p99_wait_ms: float | None  # recent queue-wait p99 (None: nothing claimed lately)
    slo_ms: float
    arrived_per_s: float | None  # None until the feed has two samples
    succeeded_per_s: float | None
    queue_growth: int | None  # queued now minus ~10 s ago (None: no older sample)


@dataclass(frozen=True, slots=True)
class Verdict:
    level: str  # "ok", "warn", "bad" or "idle"
    text: str
    why: str


def _ms(x: float) -> str:
    return f"{x / 1000:.1f} s" if x >= 1000 else f"{x:.0f} ms"


def verdict(s: Signals) -> Verdict:
    if s.queued > 0 and s.ready == 0:
        if s.starting:
            return Verdict(
                "warn",
                "Starting workers",
                f"{s.queued} queued, {s.starting} starting, none ready yet",
            )
        return Verdict("bad", "No workers", f"{s.queued} queued and no worker ready or starting")
    if s.p99_wait_ms is not None and s.p99_wait_ms > s.slo_ms:
        why = f"p99 queue wait {_ms(s.p99_wait_ms)} over the {_ms(s.slo_ms)} SLO"
        return Verdict("bad", "SLO breach", why)
    arrived, done = s.arrived_per_s, s.succeeded_per_s
    if (s.queue_growth or 0) > 0 and arrived and done is not None and arrived > BEHIND_RATIO * done:
        return Verdict(
            "warn",
            "Falling behind",
            f"{arrived:.1f}/s arriving, {done:.1f}/s completed, queue +{s.queue_growth} in 10 s",
        )
    if s.queued == 0 and s.in_flight == 0 and not arrived:
        return Verdict("idle", "Idle", "nothing queued, running or arriving")
    if s.p99_wait_ms is None:
        return Verdict("ok", "Keeping up", "no job waited to be claimed lately")
    return Verdict("ok", "Keeping up", f"p99 queue wait {_ms(s.p99_wait_ms)}, SLO {_ms(s.slo_ms)}")
