"""The gateway's section of the config file, and its API keys (``auth``)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from sluice.config.base import PRIORITIES, StrictModel, known_priorities


class GatewayConfig(StrictModel):
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
        known_priorities(v)
        if any(not 0 < f <= 1 for f in v.values()):
            raise ValueError("shed fractions must be in (0, 1]")
        full = {"high": 1.0, "normal": 0.9, "low": 0.7} | v
        if not full["low"] <= full["normal"] <= full["high"]:
            raise ValueError(f"shed fractions must satisfy low <= normal <= high, got {full}")
        return full


KEY_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
KEY_HASH_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
SECRET_FIELDS = frozenset(
    {"hash", "webhook_secret", "redis_url", "password", "sentinel_password"}
)  # values never echoed in config errors


class ApiKeyConfig(StrictModel):
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


class AuthConfig(StrictModel):
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
