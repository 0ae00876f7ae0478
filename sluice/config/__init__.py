"""The Sluice config file: one YAML document validated by pydantic.

Units live in names (``lease_s``, ``deadline_ms``). Defaults are safe in
production; a bad file raises :class:`sluice.errors.ConfigError` whose message
names the field and the value.

One module per section: ``models`` (a model's settings), ``gateway`` (with its
API keys), ``processes`` (worker, autoscaler, bulk), ``webhooks``, ``redis``;
``file`` holds the root and the loading. Import from here.
"""

from sluice.config.base import CONFIG_ENV, POD_NAME_ENV, PRIORITIES, REDIS_URL_ENV
from sluice.config.file import (
    SECRET_FIELDS,
    SluiceConfig,
    load_config,
    parse_config,
    resolve_redis_url,
)
from sluice.config.gateway import (
    KEY_HASH_RE,
    KEY_NAME_RE,
    ApiKeyConfig,
    AuthConfig,
    GatewayConfig,
)
from sluice.config.generate import GenerateConfig
from sluice.config.models import (
    AutoscalingConfig,
    BatchingConfig,
    CostConfig,
    ModelBulkConfig,
    ModelConfig,
    PredictConfig,
    QueueConfig,
    RetryConfig,
    WarmPoolConfig,
)
from sluice.config.processes import AutoscalerConfig, BulkConfig, DeviceConfig, WorkerConfig
from sluice.config.redis import RedisConfig, SentinelConfig
from sluice.config.webhooks import WebhooksConfig

__all__ = [
    "GenerateConfig",
    "CONFIG_ENV",
    "KEY_HASH_RE",
    "KEY_NAME_RE",
    "POD_NAME_ENV",
    "PRIORITIES",
    "REDIS_URL_ENV",
    "SECRET_FIELDS",
    "ApiKeyConfig",
    "AuthConfig",
    "AutoscalerConfig",
    "AutoscalingConfig",
    "BatchingConfig",
    "RetryConfig",
    "BulkConfig",
    "CostConfig",
    "DeviceConfig",
    "GatewayConfig",
    "ModelBulkConfig",
    "ModelConfig",
    "PredictConfig",
    "QueueConfig",
    "RedisConfig",
    "SentinelConfig",
    "SluiceConfig",
    "WarmPoolConfig",
    "WebhooksConfig",
    "WorkerConfig",
    "load_config",
    "parse_config",
    "resolve_redis_url",
]
