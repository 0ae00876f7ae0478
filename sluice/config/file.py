"""The whole config file: its root model, and loading and validating it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from sluice.config.base import StrictModel
from sluice.config.gateway import AuthConfig, GatewayConfig
from sluice.config.models import ModelConfig
from sluice.config.processes import AutoscalerConfig, BulkConfig, WorkerConfig
from sluice.config.redis import RedisConfig
from sluice.config.webhooks import WebhooksConfig
from sluice.connection import DEFAULT_URL, as_cluster_url, parse_url, sentinel_url
from sluice.errors import ConfigError
from sluice.keys import MODEL_NAME_RE

SECRET_FIELDS = frozenset(
    {"hash", "webhook_secret", "redis_url", "password", "sentinel_password"}
)  # values never echoed in config errors


class SluiceConfig(StrictModel):
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
