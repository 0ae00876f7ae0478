"""A model's section of the config file: its handler, buckets, cost estimate,
queue, batching, autoscaling (with its warm pool and look-ahead) and bulk feed."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sluice.config.base import PRIORITIES, StrictModel, known_priorities
from sluice.config.generate import GenerateConfig

MAX_PARTITIONS = 64  # queue.partitions' ceiling (a model event cursor names each)


class CostConfig(StrictModel):
    """How an input's cost (in tokens, or the handler's unit) is estimated."""

    method: Literal["tokenizer", "words", "chars", "items"] = "words"
    tokenizer_path: str | None = None
    chars_per_token: float = Field(4.0, gt=0)
    truncate: bool = False


class QueueConfig(StrictModel):
    max_queued_jobs: int = Field(100_000, gt=0)
    max_queued_cost: int = Field(10_000_000, gt=0)
    default_deadline_ms: int | None = Field(None, gt=0)
    max_deadline_ms: int = Field(3_600_000, gt=0)
    result_ttl_s: int = Field(3600, gt=0)
    dead_letter_ttl_s: int = Field(7 * 86400, gt=0)
    idempotency_ttl_s: int = Field(86400, gt=0)
    priority_weights: dict[str, float] = Field(
        default_factory=lambda: {"high": 4.0, "normal": 2.0, "low": 1.0}
    )
    # Aging across priorities (docs/adr/0100): a normal or low job that has waited
    # this long behind higher-priority work in its bucket goes next, oldest first.
    max_priority_wait_s: float = Field(5.0, gt=0)
    # "primary": a submit or completion is acknowledged once the primary holds it (a
    # primary crash loses what its replicas had not copied yet). "replica": only once
    # a replica holds it too (WAIT), else 503 so the client retries (docs/adr/0133).
    durability: Literal["primary", "replica"] = "primary"
    # How long a "replica" write waits for the replica's ack before answering 503; the
    # gateway's redis_timeout_s bounds the whole call, so keep this well under it.
    replica_ack_timeout_ms: int = Field(500, gt=0, le=10_000)
    # Spread the model's queues over this many hash tags, so a Redis Cluster may put
    # them on different shards (docs/adr/0159). 1 (the default) changes nothing.
    partitions: int = Field(1, ge=1, le=MAX_PARTITIONS)

    @field_validator("priority_weights")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        known_priorities(v)
        if any(w <= 0 for w in v.values()):
            raise ValueError("priority weights must be > 0")
        return {p: v.get(p, 1.0) for p in PRIORITIES}

    @model_validator(mode="after")
    def _deadlines(self) -> QueueConfig:
        d = self.default_deadline_ms
        if d is not None and d > self.max_deadline_ms:
            raise ValueError(
                f"default_deadline_ms ({d}) > max_deadline_ms ({self.max_deadline_ms})"
            )
        return self


class RetryConfig(StrictModel):
    """How a failed attempt waits before its job is claimable again (docs/adr/0153):
    ``backoff_ms`` x 2^(attempt - 1), at most ``backoff_max_ms``, the second half
    jittered. 0 requeues at once (the job goes back to its place at the queue head)."""

    backoff_ms: int = Field(500, ge=0, le=3_600_000)
    backoff_max_ms: int = Field(30_000, gt=0, le=86_400_000)

    @model_validator(mode="after")
    def _order(self) -> RetryConfig:
        if self.backoff_ms > self.backoff_max_ms:
            raise ValueError(
                f"retry.backoff_ms ({self.backoff_ms}) > backoff_max_ms ({self.backoff_max_ms})"
            )
        return self


class BatchingConfig(StrictModel):
    max_batch: int = Field(32, gt=0, le=4096)
    max_batch_tokens: int = Field(16_384, gt=0)
    lease_s: float = Field(30.0, gt=0)
    max_attempts: int = Field(3, gt=0, le=100)
    # Expected service time of one job per cost unit, used to rank bucket heads
    # (highest response ratio next) until workers report a measured rate.
    service_ms_per_cost: float = Field(0.05, gt=0)
    service_ms_base: float = Field(5.0, gt=0)
    # A bucket head waiting longer than this many expected service times goes
    # first, oldest first, whatever the ratios say (no starvation under overload).
    overdue_factor: float = Field(20.0, gt=1)


class WarmPoolConfig(StrictModel):
    """Workers kept started but parked (docs/adr/0128): loaded and warmed, heartbeating
    as ``standby``, claiming nothing; a scale-up promotes them before it starts any."""

    # Parked workers kept per model (0: no pool), or "auto": sized from the model's
    # own history of rising load (autoscaler/pool_size.py, docs/adr/0156).
    size: int | Literal["auto"] = Field(0)
    # size: auto only. The size until the history covers history_min_s (None: one
    # parked worker per serving one, enough for a 2x burst).
    initial_size: int | None = Field(None, ge=0)
    # The history the size is read from: the rise of the need within one cold start,
    # per minute, over this window, at this percentile.
    history_s: float = Field(21_600.0, gt=0)
    history_min_s: float = Field(600.0, ge=0)
    percentile: float = Field(0.99, gt=0, le=1)
    # The pool bridges a rise only until the cold starts it triggers serve: the
    # serving and promoted workers may run this busy meanwhile (the size is the
    # replicas the risen rate needs at it, beyond those serving before the rise).
    burst_utilization: float = Field(0.7, gt=0, le=1)
    # The pool's cost (parked workers at cost_fraction) is at most this share of the
    # serving fleet's mean over the history window (0: no pool can be afforded).
    max_cost_fraction: float = Field(0.5, ge=0)
    # Seconds from a promotion to the worker's first claim, as the policy plans it
    # (measured ones replace it once a promotion has been seen).
    promote_s: float = Field(2.0, ge=0)
    # What a parked worker costs, as a share of a serving one: the simulator's
    # replica-seconds (host-memory parking ~0.1; a parked pod that holds a GPU: 1.0).
    cost_fraction: float = Field(0.1, ge=0, le=1)
    # A scale-down parks the worker when the pool is short of ``size`` or a refill is
    # still loading (else stops it).
    park_on_scale_down: bool = True
    # Where a parked GPU worker keeps its weights: on the device (promotion is
    # instant), or in pinned host memory, copied back on promotion (the device's
    # memory is free while parked; the promotion pays the copy). No effect on a CPU.
    weights: Literal["device", "host"] = "device"
    # The scale-down window for the replicas a burst added, down to the count before
    # the burst (when shorter than scale_down_window_s, which holds below it): a
    # scale-down that proves early costs a promotion, not a cold start.
    scale_down_window_s: float = Field(60.0, ge=0)

    @field_validator("size")
    @classmethod
    def _size(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 0:
            raise ValueError(f"warm_pool.size must be >= 0 or 'auto', got {v}")
        return v

    @property
    def auto(self) -> bool:
        return self.size == "auto"

    @property
    def enabled(self) -> bool:
        """A pool is kept: a fixed size above 0, or auto."""
        return self.size == "auto" or self.size > 0

    def sized(self, n: int) -> WarmPoolConfig:
        """These settings with a fixed size (what a backend keeps this period)."""
        return self.model_copy(update={"size": max(0, n)})

    @property
    def start_size(self) -> int:
        """The fixed size, or auto's size before any history (initial_size, else 1)."""
        if isinstance(self.size, int):
            return self.size
        return self.initial_size if self.initial_size is not None else 1


class PredictConfig(StrictModel):
    """The policy's optional look-ahead (docs/adr/0129): the arrival rate's trend over
    ``window_s``, projected one cold start ahead, never more than ``max_factor`` times
    the rate now."""

    enabled: bool = False
    window_s: float = Field(120.0, gt=0)
    max_factor: float = Field(2.0, ge=1)


class AutoscalingConfig(StrictModel):
    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(4, ge=0)
    target_utilization: float = Field(0.65, gt=0, le=1)
    p99_wait_slo_ms: float = Field(1000.0, gt=0)
    # Generative models only (a generate: section, ADR 0144/0149): the time-to-first-
    # token p99 over metrics_window_s above this, while jobs wait, scales up.
    ttft_slo_ms: float = Field(1000.0, gt=0)
    backlog_drain_s: float = Field(30.0, gt=0)
    period_s: float = Field(5.0, gt=0)
    scale_up_max_percent: float = Field(100.0, gt=0)
    scale_up_max_step: int = Field(4, gt=0)
    scale_down_window_s: float = Field(300.0, ge=0)
    scale_down_max_step: int = Field(1, gt=0)
    tolerance: float = Field(0.1, ge=0, lt=1)
    idle_s: float | None = Field(None, gt=0)
    cold_start_s: float = Field(30.0, ge=0)
    low_priority_max_replicas: int | None = Field(None, ge=0)
    gpu_memory_gb: float = Field(0.0, ge=0)
    # Local backend: CPU cores one CPU worker holds (its torch threads). None: the
    # handler's params.num_threads, else the machine's cores / max_replicas (at
    # least 1); the synthetic handler holds none. 0: holds none (I/O-bound).
    cpu_cores: int | None = Field(None, ge=0)
    # The saturation guard (docs/adr/0126): a scale-up that did not raise the drain
    # rate caps the replicas this long; 0 turns the guard off.
    saturation_hold_s: float = Field(600.0, ge=0)
    metrics_window_s: float = Field(60.0, gt=0)
    # Per-replica service rate (cost units/s) assumed until workers report a
    # measured one; None derives it from the batching block.
    service_rate_cost_per_s: float | None = Field(None, gt=0)
    # Kubernetes backend: the worker Deployment of this model
    # (None = "sluice-worker-<model>").
    deployment: str | None = None
    warm_pool: WarmPoolConfig = Field(default_factory=WarmPoolConfig)
    predict: PredictConfig = Field(default_factory=PredictConfig)

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingConfig:
        if self.max_replicas < self.min_replicas:
            raise ValueError(
                f"max_replicas ({self.max_replicas}) < min_replicas ({self.min_replicas})"
            )
        if self.idle_s is not None and self.min_replicas > 0:
            raise ValueError(
                f"idle_s ({self.idle_s}) scales to zero, so min_replicas must be 0 "
                f"(got {self.min_replicas})"
            )
        return self


class ModelBulkConfig(StrictModel):
    """How bulk jobs (sluice/bulk) feed this model's queues."""

    # Items of one bulk job waiting in the queues at once: enough to keep every
    # replica's next batch ready, few enough that interactive jobs never queue
    # behind a bulk backlog (None: 4 x batching.max_batch).
    max_queued: int | None = Field(None, gt=0, le=100_000)
    # A batch of bulk items only (None: the batching block's limits). Smaller bulk
    # batches free a worker sooner for an interactive job that arrives meanwhile.
    max_batch: int | None = Field(None, gt=0, le=4096)
    max_batch_tokens: int | None = Field(None, gt=0)
    # Live workers kept free of bulk batches: a worker claims bulk items only while
    # at least this many others hold none, so an interactive job that arrives has a
    # worker about to be free. 0: bulk may occupy every worker between interactive jobs.
    reserve_workers: int = Field(0, ge=0)
    # Serving workers kept idle (ADR 0164): a worker claims bulk items only while at
    # least this many *others* hold no batch at all (interactive or bulk), so an
    # interactive job that arrives finds an idle worker. 0: off.
    idle_reserve: int = Field(0, ge=0)
    # Bulk items per handler call inside a bulk batch (ADR 0155): between two calls
    # the worker gives the rest of the batch back (requeued, no attempt used) if an
    # interactive job waits, so that job waits out one micro-batch, not a whole bulk
    # batch. None: a bulk batch is one handler call and always runs to its end.
    micro_batch: int | None = Field(None, gt=0, le=4096)


class LimitsConfig(StrictModel):
    """Bounds on one job's run (docs/adr/0154)."""

    # A job running longer than this (from its claim) is failed for good as
    # run_time_exceeded, not retried: its input is what is slow, and a retry would
    # spend max_attempts x this much worker time to fail again. None: no limit.
    max_run_ms: int | None = Field(None, gt=0)


class PauseConfig(StrictModel):
    """What a pause does when its request does not say (docs/adr/0154)."""

    # While paused, refuse new jobs (503 model_paused) instead of queueing them.
    refuse_submits: bool = False


class ModelConfig(StrictModel):
    handler: str
    params: dict[str, Any] = Field(default_factory=dict)
    buckets: list[int] = Field(default_factory=lambda: [32, 128, 512])
    cost: CostConfig = Field(default_factory=CostConfig)
    queue: QueueConfig = Field(default_factory=QueueConfig)
    batching: BatchingConfig = Field(default_factory=BatchingConfig)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    autoscaling: AutoscalingConfig = Field(default_factory=AutoscalingConfig)
    bulk: ModelBulkConfig = Field(default_factory=ModelBulkConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    pause: PauseConfig = Field(default_factory=PauseConfig)
    # present: a generative model (token streams, slots; ADR 0144)
    generate: GenerateConfig | None = None

    @field_validator("buckets")
    @classmethod
    def _buckets(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("at least one bucket is needed")
        if any(b <= 0 for b in v):
            raise ValueError(f"bucket bounds must be > 0, got {v}")
        if sorted(set(v)) != v:
            raise ValueError(f"bucket bounds must be strictly increasing, got {v}")
        return v

    @model_validator(mode="after")
    def _budget(self) -> ModelConfig:
        if self.batching.max_batch_tokens < self.buckets[-1]:
            raise ValueError(
                f"batching.max_batch_tokens ({self.batching.max_batch_tokens}) < the largest "
                f"bucket ({self.buckets[-1]}): a job of that size could never be claimed"
            )
        bulk_tokens = self.bulk.max_batch_tokens
        if bulk_tokens is not None and bulk_tokens < self.buckets[-1]:
            raise ValueError(
                f"bulk.max_batch_tokens ({bulk_tokens}) < the largest bucket "
                f"({self.buckets[-1]}): a bulk item of that size could never be claimed"
            )
        _check_generative(self)
        return self

    @property
    def generative(self) -> bool:
        return self.generate is not None

    @property
    def bucket_names(self) -> list[str]:
        return [str(b) for b in self.buckets]

    @property
    def bulk_max_queued(self) -> int:
        return self.bulk.max_queued or 4 * self.batching.max_batch


GENERATIVE_HANDLER = "causal-lm"  # the built-in generative handler (workers.handlers)


def stream_entries_bound(model: ModelConfig) -> int:
    """The most entries one job's token stream can get: per attempt a start (or
    restart) entry, at most one tokens entry per output token (the step writes one
    per sequence per step, and only with news; a slot holds ``max_seq_tokens``)
    and an end or error entry."""
    g = model.generate
    assert g is not None
    return model.batching.max_attempts * (g.max_seq_tokens + 2)


def _check_generative(model: ModelConfig) -> None:
    """A ``generate:`` section goes with a generative handler (``causal-lm`` or a
    user's ``package.module:Class``), and ``causal-lm`` with a ``generate:`` section;
    a job's whole stream fits ``generate.stream_maxlen``."""
    user_handler = ":" in model.handler
    if model.generate is not None and model.queue.partitions > 1:
        raise ValueError("queue.partitions > 1 is not supported for a generative model yet")
    if model.generate is None:
        if model.handler == GENERATIVE_HANDLER:
            raise ValueError(
                f"handler {GENERATIVE_HANDLER!r} generates text: it needs a generate: section "
                "(slots, max_seq_tokens, ...; docs/config.md)"
            )
        return
    if model.handler != GENERATIVE_HANDLER and not user_handler:
        raise ValueError(
            f"generate: is for a generative handler ({GENERATIVE_HANDLER!r} or a "
            f"'package.module:Class' engine handler); handler {model.handler!r} makes no tokens"
        )
    need = stream_entries_bound(model)
    if model.generate.stream_maxlen < need:
        raise ValueError(
            f"generate.stream_maxlen ({model.generate.stream_maxlen}) is below what one job's "
            f"stream may hold: batching.max_attempts ({model.batching.max_attempts}) x "
            f"(generate.max_seq_tokens ({model.generate.max_seq_tokens}) + 2) = {need}; "
            "raise it (or lower either), or a restarted job's entries would be trimmed"
        )
