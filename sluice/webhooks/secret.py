"""The config's webhook signing secret: read by the gateway (does a signer exist?)
and by the notifier (it signs with it), so it lives in the core."""

from __future__ import annotations

import os
from pathlib import Path

from sluice.config import WebhooksConfig
from sluice.errors import ConfigError


def config_secret(cfg: WebhooksConfig, environ: dict[str, str] | None = None) -> str | None:
    """The config's signing secret (file first, then the environment), or None."""
    env = os.environ if environ is None else environ
    if cfg.secret_file:
        try:
            return Path(cfg.secret_file).read_text().strip() or None
        except OSError as e:
            raise ConfigError(
                f"webhooks.secret_file {cfg.secret_file}: cannot read: {e.strerror}"
            ) from e
    if cfg.secret_env:
        return env.get(cfg.secret_env) or None
    return None
