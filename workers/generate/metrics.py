"""A generative worker's Prometheus metrics (``sluice_generate_*``), on the worker's
own registry beside ``sluice_worker_*``, and its recent output rate for the heartbeat.

Labels are ``model``, ``phase`` (prefill, decode) and ``reason`` (a finish reason):
bounded sets, never a job id.
"""

from __future__ import annotations

from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Time to first token spans a queue wait (seconds) down to one step (milliseconds).
TTFT_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# One step, one token gap: a few milliseconds on CPU at batch 1 to a long prefill.
STEP_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
RATE_WINDOW_S = 10.0  # tokens/s in the heartbeat: the output of the last 10 s


class TokenRate:
    """Output tokens per second over the last ``window_s`` (``now`` passed in)."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._events: deque[tuple[float, int]] = deque()
        self._sum = 0

    def add(self, now: float, tokens: int) -> None:
        if tokens:
            self._events.append((now, tokens))
            self._sum += tokens
        self._trim(now)

    def rate(self, now: float) -> float:
        self._trim(now)
        return self._sum / self.window_s

    def _trim(self, now: float) -> None:
        while self._events and self._events[0][0] <= now - self.window_s:
            self._sum -= self._events.popleft()[1]


class GenerateMetrics:
    """Every ``sluice_generate_*`` metric of one worker, in the worker's registry
    (a registry of its own when none is given: what a scrape of it would show)."""

    def __init__(
        self, model: str, registry: CollectorRegistry | None = None, slots: int = 0
    ) -> None:
        self.model = model
        registry = registry if registry is not None else CollectorRegistry()
        self.registry = registry
        m = ["model"]
        self.ttft_seconds = Histogram(
            "sluice_generate_ttft_seconds",
            "Time to first token: enqueue to the step that produced it.",
            m,
            buckets=TTFT_SECONDS,
            registry=registry,
        )
        self.inter_token_seconds = Histogram(
            "sluice_generate_inter_token_seconds",
            "Time between a sequence's output tokens.",
            m,
            buckets=STEP_SECONDS,
            registry=registry,
        )
        self.step_seconds = Histogram(
            "sluice_generate_step_seconds",
            "Engine time per step: prefill (a prompt chunk in it) or decode only.",
            ["model", "phase"],
            buckets=STEP_SECONDS,
            registry=registry,
        )
        self.round_trip_seconds = Histogram(
            "sluice_generate_round_trip_seconds",
            "The step round trip: tokens stored, leases renewed, ended jobs, the claim.",
            m,
            buckets=STEP_SECONDS,
            registry=registry,
        )
        self._counters_and_gauges(registry)
        self.slots.labels(model).set(slots)
        self.rate = TokenRate()

    def _counters_and_gauges(self, reg: CollectorRegistry) -> None:
        m = ["model"]
        self.tokens_total = Counter(
            "sluice_generate_tokens_total", "Output tokens produced.", m, registry=reg
        )
        self.prompt_tokens_total = Counter(
            "sluice_generate_prompt_tokens_total", "Prompt tokens admitted.", m, registry=reg
        )
        self.sequences_total = Counter(
            "sluice_generate_sequences_total",
            "Sequences that left a slot, by why (stop, length, error, invalid_input, lost).",
            ["model", "reason"],
            registry=reg,
        )
        self.tokens_per_second = Gauge(
            "sluice_generate_tokens_per_second",
            f"Output tokens per second over the last {RATE_WINDOW_S:g} s.",
            m,
            registry=reg,
        )
        self.slots = Gauge("sluice_generate_slots", "Slots of this worker.", m, registry=reg)
        self.slots_busy = Gauge(
            "sluice_generate_slots_busy", "Slots holding a sequence.", m, registry=reg
        )
        self.slot_occupancy = Gauge(
            "sluice_generate_slot_occupancy", "Busy slots / slots.", m, registry=reg
        )

    def observe_step(
        self, phase: str, step_s: float, tokens: int, ttft: list[float], itl: list[float]
    ) -> None:
        m = self.model
        self.step_seconds.labels(m, phase).observe(step_s)
        if tokens:
            self.tokens_total.labels(m).inc(tokens)
        h = self.ttft_seconds.labels(m)
        for t in ttft:
            h.observe(max(t, 0.0))
        h = self.inter_token_seconds.labels(m)
        for t in itl:
            h.observe(t)

    def set_slots(self, busy: int, slots: int, now: float) -> float:
        """The occupancy gauges and the rate; returns the rate (tokens/s)."""
        m = self.model
        self.slots_busy.labels(m).set(busy)
        self.slot_occupancy.labels(m).set(busy / slots if slots else 0.0)
        rate = self.rate.rate(now)
        self.tokens_per_second.labels(m).set(rate)
        return rate

    def ended(self, reason: str, n: int = 1) -> None:
        if n:
            self.sequences_total.labels(self.model, reason).inc(n)
