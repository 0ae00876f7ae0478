"""The environment variables that name the config file, the Redis URL and a
worker's pod: a module of their own, so the command line's options can name them
without importing the config schema (pydantic) at start-up."""

from __future__ import annotations

CONFIG_ENV = "SLUICE_CONFIG"
REDIS_URL_ENV = "SLUICE_REDIS_URL"
# A worker's own pod name, set from metadata.name by the downward API (docs/adr/0115).
POD_NAME_ENV = "SLUICE_POD_NAME"
