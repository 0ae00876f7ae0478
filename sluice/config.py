"""The Sluice config file: one YAML document validated by pydantic.

Units live in names (``lease_s``, ``deadline_ms``). Defaults are safe in
production; a bad file raises :class:`sluice.errors.ConfigError` whose message
names the field and the value.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sluice.connection import DEFAULT_URL, as_cluster_url, parse_url, sentinel_url
from sluice.errors import ConfigError
from sluice.keys import MODEL_NAME_RE

PRIORITIES: tuple[str, ...] = ("high", "normal", "low")
CONFIG_ENV = "SLUICE_CONFIG"
REDIS_URL_ENV = "SLUICE_REDIS_URL"
# A worker's own pod name, set from metadata.name by the downward API (docs/adr/0115).
POD_NAME_ENV = "SLUICE_POD_NAME"


def _known_priorities(by_priority: dict[str, float]) -> None:
    unknown = set(by_priority) - set(PRIORITIES)
    if unknown:
        raise ValueError(f"unknown priority {sorted(unknown)}; use {list(PRIORITIES)}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CostConfig(_Strict):
    """How an input's cost (in tokens, or the handler's unit) is estimated."""

    method: Literal["tokenizer", "words", "chars", "items"] = "words"
    tokenizer_path: str | None = None
    chars_per_token: float = Field(4.0, gt=0)
    truncate: bool = False


class QueueConfig(_Strict):
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

    @field_validator("priority_weights")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        _known_priorities(v)
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


class BatchingConfig(_Strict):
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


class WarmPoolConfig(_Strict):
    """Workers kept started but parked (docs/adr/0128): loaded and warmed, heartbeating
    as ``standby``, claiming nothing; a scale-up promotes them before it starts any."""

    size: int = Field(0, ge=0)  # parked workers kept per model (0: no pool)
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


class PredictConfig(_Strict):
    """The policy's optional look-ahead (docs/adr/0129): the arrival rate's trend over
    ``window_s``, projected one cold start ahead, never more than ``max_factor`` times
    the rate now."""

    enabled: bool = False
    window_s: float = Field(120.0, gt=0)
    max_factor: float = Field(2.0, ge=1)


class AutoscalingConfig(_Strict):
    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(4, ge=0)
    target_utilization: float = Field(0.65, gt=0, le=1)
    p99_wait_slo_ms: float = Field(1000.0, gt=0)
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


class ModelBulkConfig(_Strict):
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


class ModelConfig(_Strict):
    handler: str
    params: dict[str, Any] = Field(default_factory=dict)
    buckets: list[int] = Field(default_factory=lambda: [32, 128, 512])
    cost: CostConfig = Field(default_factory=CostConfig)
    queue: QueueConfig = Field(default_factory=QueueConfig)
    batching: BatchingConfig = Field(default_factory=BatchingConfig)
    autoscaling: AutoscalingConfig = Field(default_factory=AutoscalingConfig)
    bulk: ModelBulkConfig = Field(default_factory=ModelBulkConfig)

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
        return self

    @property
    def bucket_names(self) -> list[str]:
        return [str(b) for b in self.buckets]

    @property
    def bulk_max_queued(self) -> int:
        return self.bulk.max_queued or 4 * self.batching.max_batch


class GatewayConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8000, gt=0, lt=65536)
    max_body_bytes: int = Field(1_048_576, gt=0)
    max_batch_inputs: int = Field(256, gt=0)
    predict_timeout_s: float = Field(30.0, gt=0, le=60)
    redis_timeout_s: float = Field(2.0, gt=0)
    # Connections per gateway process; past it a request waits (up to
    # redis_timeout_s) for a free one instead of failing.
    redis_max_connections: int = Field(256, gt=0)
    # A priority is shed (429) once the model's queue holds this fraction of its
    # max_queued_jobs or max_queued_cost: low goes first, then normal, then high.
    shed_fraction: dict[str, float] = Field(
        default_factory=lambda: {"high": 1.0, "normal": 0.9, "low": 0.7}
    )
    # How often the gateway refreshes queue and worker snapshots (metrics gauges,
    # Retry-After, workers-ready check); scrapes never cost a Redis round trip.
    stats_refresh_s: float = Field(1.0, gt=0, le=60)
    max_wait_s: float = Field(60.0, gt=0, le=60)
    # Open GET /v1/models/{m}/events streams per gateway process, all models
    # together; past it a new one is refused (429, Retry-After). They share one
    # Redis reader per model, so this bounds memory and fan-out work, not connections.
    model_events_max_viewers: int = Field(100, gt=0)
    # Admin routes (/metrics, /dashboard, /v1/admin) on their own listener: when
    # set, they are served there only (absent from `port`).
    admin_port: int | None = Field(None, gt=0, lt=65536)
    admin_host: str = "127.0.0.1"

    @field_validator("shed_fraction")
    @classmethod
    def _shed(cls, v: dict[str, float]) -> dict[str, float]:
        _known_priorities(v)
        if any(not 0 < f <= 1 for f in v.values()):
            raise ValueError("shed fractions must be in (0, 1]")
        full = {"high": 1.0, "normal": 0.9, "low": 0.7} | v
        if not full["low"] <= full["normal"] <= full["high"]:
            raise ValueError(f"shed fractions must satisfy low <= normal <= high, got {full}")
        return full


class WorkerConfig(_Strict):
    heartbeat_s: float = Field(2.0, gt=0)
    heartbeat_ttl_s: float = Field(10.0, gt=0)
    quarantine_after_failures: int = Field(5, gt=0)
    quarantine_grace_s: float = Field(30.0, ge=0)
    overlap: bool = True
    metrics_port: int = Field(0, ge=0, lt=65536)


class DeviceConfig(_Strict):
    """A device the local autoscaler backend may place workers on."""

    name: str  # what the worker gets in CUDA_VISIBLE_DEVICES ("0", "1", ...)
    memory_gb: float = Field(gt=0)


class AutoscalerConfig(_Strict):
    """The autoscaler process (per-model policy lives in each model's autoscaling block)."""

    backend: Literal["local", "kubernetes", "dry-run"] = "local"
    devices: list[DeviceConfig] = Field(default_factory=list)  # empty: CPU, no memory budget
    # Local backend: cores CPU workers may hold in all (None: the cores this
    # process may run on). A CPU worker that would oversubscribe them is not started.
    cpu_cores: int | None = Field(None, gt=0)
    namespace: str = "default"
    restart_backoff_s: float = Field(1.0, gt=0)
    restart_backoff_max_s: float = Field(60.0, gt=0)
    drain_timeout_s: float = Field(300.0, gt=0)
    metrics_port: int = Field(0, ge=0, lt=65536)

    @field_validator("devices")
    @classmethod
    def _devices(cls, v: list[DeviceConfig]) -> list[DeviceConfig]:
        names = [d.name for d in v]
        if len(set(names)) != len(names):
            raise ValueError(f"device names must be unique, got {names}")
        return v


class BulkConfig(_Strict):
    """Bulk jobs: JSONL files run by RQ coordinators at the lowest priority."""

    rq_queue: str = Field("sluice-bulk", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    max_file_bytes: int = Field(64 * 1024 * 1024, gt=0)
    max_lines: int = Field(1_000_000, gt=0)
    # Input, output and state are kept this long after a bulk job ends.
    ttl_s: int = Field(7 * 86400, gt=0)
    # One RQ job runs a coordinator for at most this long, then requeues itself:
    # RQ workers take turns between bulk jobs, and RQ's job timeout stays meaningful.
    slice_s: float = Field(60.0, gt=0)
    poll_s: float = Field(0.1, gt=0, le=10)
    # A coordinator renews its lease every poll; one silent this long is presumed
    # dead and its bulk job is resumed from its checkpoint by the reaper.
    lease_s: float = Field(15.0, gt=0)
    # Lines parsed, estimated and submitted per round trip.
    feed_chunk: int = Field(256, gt=0, le=10_000)
    # RQ worker processes `sluice up` starts (each coordinates one bulk job at a time).
    rq_workers: int = Field(1, ge=0, le=64)
    # Prometheus port of a `sluice bulk worker` (all interfaces); 0 serves none.
    # `sluice up` gives each of its RQ workers a free one and names it in its banner.
    metrics_port: int = Field(0, ge=0, lt=65536)
    # Where RQ keeps its queues, when not on Sluice's Redis: RQ needs one server (or a
    # Sentinel service), so a deployment on Redis Cluster points this elsewhere.
    redis_url: str | None = None

    @model_validator(mode="after")
    def _lease(self) -> BulkConfig:
        if self.lease_s <= 2 * self.poll_s:
            raise ValueError(f"lease_s ({self.lease_s}) must be > 2 x poll_s ({self.poll_s})")
        return self


class WebhooksConfig(_Strict):
    """Completion webhooks (docs/webhooks.md, ADR 0131): who may be called back, how
    deliveries are signed and retried, and the notifier process that sends them."""

    # The Standard Webhooks signing secret ("whsec_" + base64), from an environment
    # variable or a file (e.g. a mounted Secret); an API key's own secret wins.
    # Without any secret a submit that asks for a webhook is refused (422).
    secret_env: str | None = "SLUICE_WEBHOOK_SECRET"
    secret_file: str | None = None
    # Without API keys (or for a key that sets none): the hosts a webhook may name
    # ("api.example.com", or "*.example.com" for its subdomains); empty = any host.
    allow_hosts: list[str] = Field(default_factory=list)
    # Networks a webhook may reach although private, loopback or link-local (SSRF
    # guard): e.g. ["10.1.2.0/24"] for a receiver inside the cluster. Never the default.
    allow_networks: list[str] = Field(default_factory=list)
    # Plain http:// URLs (https only by default).
    allow_http: bool = False
    # A PEM bundle of the CAs that receivers' certificates are verified against
    # (None: the system's, via certifi); for receivers behind a private CA.
    ca_file: str | None = None
    # Retries: the delay before each next attempt (the last repeats), +-jitter,
    # until horizon_s after the job ended; 2xx ends it, 410 stops it, 429/5xx/timeouts
    # retry, any other status retries max_client_error_attempts times in all.
    retry_schedule_s: list[float] = Field(
        default_factory=lambda: [5.0, 30.0, 120.0, 600.0, 3600.0, 10800.0, 21600.0, 43200.0]
    )
    jitter: float = Field(0.2, ge=0, lt=1)
    horizon_s: float = Field(86400.0, gt=0)
    max_client_error_attempts: int = Field(3, gt=0)
    # A result up to this size (its JSON) rides in the body; larger ones are a link.
    max_result_bytes: int = Field(256 * 1024, gt=0)
    # Base URL of the gateway for those links (None: a path, /v1/jobs/{id}).
    public_url: str | None = None
    # The notifier: attempts in flight, at most per host, and its timeouts.
    max_concurrency: int = Field(64, gt=0)
    per_host_connections: int = Field(8, gt=0)
    connect_timeout_s: float = Field(5.0, gt=0)
    timeout_s: float = Field(15.0, gt=0)
    # Response bodies are read up to this many bytes (the rest is dropped).
    max_response_bytes: int = Field(4096, gt=0)
    metrics_port: int = Field(0, ge=0, lt=65536)

    @field_validator("retry_schedule_s")
    @classmethod
    def _schedule(cls, v: list[float]) -> list[float]:
        if not v or any(d <= 0 for d in v):
            raise ValueError("retry_schedule_s needs at least one delay, each > 0")
        return v

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        for net in v:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError as e:
                raise ValueError(f"allow_networks: {net!r} is not a network ({e})") from e
        return v

    @property
    def record_ttl_s(self) -> int:
        """How long a delivery's record lives: the horizon and a day to read it."""
        return int(self.horizon_s) + 86400


KEY_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
KEY_HASH_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
SECRET_FIELDS = frozenset(
    {"hash", "webhook_secret", "redis_url", "password", "sentinel_password"}
)  # values never echoed in config errors


class ApiKeyConfig(_Strict):
    """One API key, stored only as the SHA-256 of the key (``sha256:<64 hex>``)."""

    name: str  # the owner id: jobs, limits and idempotency keys belong to it
    hash: str
    admin: bool = False
    rate_limit_per_s: float | None = Field(None, gt=0)
    burst: int | None = Field(None, gt=0)
    max_queued_jobs: int | None = Field(None, gt=0)
    # The highest priority this key may ask for (None = any); bulk is always allowed.
    max_priority: str | None = None
    # Webhooks: the URL a job of this key reports to when its submit names none, the
    # hosts its webhooks may name (None: webhooks.allow_hosts), and its own signing
    # secret (None: webhooks' secret); keep it in keys_file or keys_env, not the config.
    webhook_url: str | None = Field(None, max_length=2048)
    webhook_allow_hosts: list[str] | None = None
    webhook_secret: str | None = None

    @field_validator("max_priority")
    @classmethod
    def _max_priority(cls, v: str | None) -> str | None:
        if v is not None and v not in PRIORITIES:
            raise ValueError(f"max_priority {v!r} is not a priority; use one of {list(PRIORITIES)}")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not KEY_NAME_RE.match(v):
            raise ValueError(f"key name {v!r} must be 1-64 letters, digits, '_', '.', '@' or '-'")
        return v

    @field_validator("hash")
    @classmethod
    def _hash(cls, v: str) -> str:
        if not KEY_HASH_RE.match(v):
            # Never echo the value: it may be a plaintext key pasted by mistake.
            raise ValueError(
                "must be 'sha256:' and 64 lowercase hex digits, the hash of the key, never "
                "the key itself; `sluice keys new NAME` prints a key and its hash line"
            )
        return v


class AuthConfig(_Strict):
    """API keys: none configured (the default) leaves the gateway open."""

    keys: list[ApiKeyConfig] = Field(default_factory=list)
    # A file (e.g. a mounted Kubernetes Secret) and/or the name of an environment
    # variable, each holding a YAML list of entries shaped like ``keys``.
    keys_file: str | None = None
    keys_env: str | None = None
    # Limits for keys that set none of their own (None = no limit).
    default_rate_limit_per_s: float | None = Field(None, gt=0)
    default_burst: int | None = Field(None, gt=0)
    default_max_queued_jobs: int | None = Field(None, gt=0)

    @field_validator("keys")
    @classmethod
    def _unique(cls, v: list[ApiKeyConfig]) -> list[ApiKeyConfig]:
        names = [k.name for k in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"key names must be unique, repeated: {dup}")
        return v


class SentinelConfig(_Strict):
    """Reach Redis through Sentinel: redis-py finds the primary, and again after a
    failover. Compiles to a ``redis+sentinel://`` URL (sluice/connection.py)."""

    addresses: list[str] = Field(min_length=1)  # host:port of each sentinel
    service_name: str = Field(min_length=1)
    username: str | None = None
    password: str | None = None  # the primary's (and replicas')
    sentinel_password: str | None = None
    db: int = Field(0, ge=0)
    tls: bool = False  # TLS to the primary
    sentinel_tls: bool = False


class RedisConfig(_Strict):
    sentinel: SentinelConfig | None = None
    # redis_url names one node of a Redis Cluster; redis-py learns the rest.
    cluster: bool = False


class SluiceConfig(_Strict):
    redis_url: str | None = None
    redis: RedisConfig = Field(default_factory=RedisConfig)
    models: dict[str, ModelConfig]
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    worker: WorkerConfig = Field(default_factory=WorkerConfig)
    autoscaler: AutoscalerConfig = Field(default_factory=AutoscalerConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    bulk: BulkConfig = Field(default_factory=BulkConfig)
    webhooks: WebhooksConfig = Field(default_factory=WebhooksConfig)

    @field_validator("models")
    @classmethod
    def _names(cls, v: dict[str, ModelConfig]) -> dict[str, ModelConfig]:
        if not v:
            raise ValueError("at least one model is needed")
        for name in v:
            if not MODEL_NAME_RE.match(name):
                raise ValueError(
                    f"model name {name!r} must be lowercase letters, digits, '-' or '_'"
                )
        return v

    @field_validator("redis_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                parse_url(v)
            except ConfigError as e:
                raise ValueError(str(e)) from None
        return v

    @model_validator(mode="after")
    def _one_redis(self) -> SluiceConfig:
        r = self.redis
        if r.sentinel and (r.cluster or self.redis_url):
            raise ValueError(
                "redis.sentinel names the Redis by itself: drop redis_url and redis.cluster"
            )
        if r.cluster and not self.redis_url:
            raise ValueError("redis.cluster needs redis_url: the address of one cluster node")
        return self

    def model(self, name: str) -> ModelConfig:
        return self.models[name]

    def redis_target_url(self) -> str | None:
        """The one URL every process connects with (None: not set in the file)."""
        s = self.redis.sentinel
        if s is not None:
            return sentinel_url(
                s.addresses,
                s.service_name,
                password=s.password,
                username=s.username,
                db=s.db,
                tls=s.tls,
                sentinel_password=s.sentinel_password,
                sentinel_tls=s.sentinel_tls,
            )
        if self.redis_url and self.redis.cluster:
            return as_cluster_url(self.redis_url)
        return self.redis_url


def _format_error(e: ValidationError, source: str) -> str:
    first = e.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
    msg = first["msg"].removeprefix("Value error, ")
    extra = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
    if first["type"] in ("missing",):
        return f"{source}: {loc}: field required{extra}"
    value = first.get("input")
    if first["loc"] and first["loc"][-1] in SECRET_FIELDS:  # maybe a pasted plaintext key
        return f"{source}: {loc}: {msg}{extra}"
    if isinstance(value, dict):  # a whole-section check: its message names the fields
        return f"{source}: {loc}: {msg}{extra}"
    return f"{source}: {loc} = {value!r}: {msg}{extra}"


def parse_config(data: Any, source: str = "config") -> SluiceConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    try:
        return SluiceConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_error(e, source)) from e


def load_config(path: str | os.PathLike[str]) -> SluiceConfig:
    """Load and validate a config file; raises ConfigError with one clear line."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"{p}: cannot read config file: {e.strerror}") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}".splitlines()[0]) from e
    return parse_config(data, str(p))


def resolve_redis_url(cli_value: str | None, config: SluiceConfig | None) -> str:
    """--redis-url (or SLUICE_REDIS_URL) wins, then the file, then localhost."""
    if cli_value:
        return cli_value
    url = config.redis_target_url() if config is not None else None
    return url or DEFAULT_URL
