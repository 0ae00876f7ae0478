"""What one read of one model saw: the input of every scaling decision.

Its own module because both halves of the decision read it, :mod:`autoscaler.policy`
(interactive need) and :mod:`autoscaler.bulk_policy` (bulk work, weighed after), and
policy calls bulk_policy: with the type here neither has to import the other back.
The observer (:mod:`autoscaler.observe`) builds it from Redis; the simulator
(:mod:`autoscaler.sim.simulator`) builds the same from its queueing model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GenerateSignals:
    """A generative model's slot and token signals (ADR 0149); None fields unmeasured."""

    slots: int  # per replica: the live workers' reported slots, else generate.slots
    slots_busy: int  # active sequences: heartbeats' slots_busy, never below in_flight
    slots_total: int = 0  # slots of the serving workers (heartbeats); 0 when none report
    ttft_p50_ms: float | None = None  # over autoscaling.metrics_window_s
    ttft_p99_ms: float | None = None
    tokens_per_s: float | None = None  # output tokens/s per serving replica, measured
    expected_output_tokens: float = 64.0  # per job: the prior (generate.expected_output_tokens)

    @property
    def occupancy(self) -> float | None:
        """Busy share of the serving workers' slots (None: no worker reports slots)."""
        return min(1.0, self.slots_busy / self.slots_total) if self.slots_total else None


@dataclass(frozen=True, slots=True)
class Observation:
    """What the observer saw for one model; ``None`` fields were not readable."""

    current: int  # replicas the backend runs or is starting (draining ones excluded)
    ready: int = 0
    starting: int = 0
    draining: int = 0
    parked: int = 0  # warm-pool workers started and parked (standby): promoted in promote_s
    queued: int | None = 0
    queued_cost: float | None = 0.0
    queued_non_low: int | None = None  # None: unknown, assume not all low priority
    in_flight: int = 0
    arrival_rate_cost: float | None = 0.0  # cost units/s over the metrics window
    arrival_rate_cost_recent: float | None = None  # policy.RECENT_RATE_S: reacts fast
    arrival_rate_cost_burst: float | None = None  # policy.BURST_RATE_S: warm pools only
    # The arrival rate's trend (cost units/s per second) over predict.window_s: the
    # newer half's rate minus the older half's, over half the window. None: no window.
    arrival_rate_slope: float | None = None
    completion_rate_cost: float | None = None
    completion_rate_cost_recent: float | None = None  # RECENT_RATE_S: the saturation guard
    service_rate: float | None = None  # measured cost units/s per busy worker
    p99_wait_ms: float | None = None  # recent queue-wait p99 (recorded at claim)
    oldest_wait_ms: float = 0.0  # age of the oldest queued job: a stuck queue shows here
    cold_start_s: float | None = None  # measured spawn-to-ready
    promote_s: float | None = None  # measured promotion-to-first-claim of parked workers
    # The live workers' start path, median seconds per stage (workers/startpath.py).
    start_path: tuple[tuple[str, float], ...] = ()
    # Bulk items (rank 3, ADR 0090). The fields above exclude them: queued, queued_cost
    # and the arrival rates are interactive only (the observer subtracts bulk).
    bulk_queued: int = 0  # bulk items in the queues now
    bulk_queued_cost: float = 0.0  # part of the backlog below; shown, not decided on
    bulk_backlog_cost: float = 0.0  # all unfinished bulk work: queued + not yet fed
    # A generative model's slots, TTFT and tokens/s (ADR 0149); None for the others,
    # whose decisions never read it.
    generate: GenerateSignals | None = None
    # An operator paused the model (ADR 0154): no worker claims, so the count holds.
    paused: bool = False

    @property
    def missing(self) -> bool:
        """The queue read failed: nothing may be decided from this observation."""
        return self.queued is None or self.queued_cost is None
