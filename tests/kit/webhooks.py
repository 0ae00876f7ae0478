"""Webhook fixtures: a config whose webhooks may reach 127.0.0.1, a notifier in a thread."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from notifier.loop import Notifier, build
from sluice.config import SluiceConfig, parse_config

SECRET = "whsec_" + base64.b64encode(b"sluice-test-secret-0123456789abc").decode()
SECRET_ENV = "SLUICE_TEST_WEBHOOK_SECRET"


def hook_config(**webhooks: Any) -> SluiceConfig:
    wh: dict[str, Any] = {
        "secret_env": SECRET_ENV,
        "allow_networks": ["127.0.0.1/32"],
        "allow_http": True,
        "retry_schedule_s": [0.2, 0.4],
        "jitter": 0.0,
        "connect_timeout_s": 1.0,
        "timeout_s": 2.0,
    }
    wh.update(webhooks)
    models = {
        "m": {"handler": "synthetic", "buckets": [32, 128, 512]},
        "n": {"handler": "synthetic", "buckets": [32]},
    }
    return parse_config({"models": models, "webhooks": wh})


@contextmanager
def notifier(
    cfg: SluiceConfig, redis_url: str, env: dict[str, str] | None = None
) -> Iterator[Notifier]:
    """A notifier running in a thread of its own until the block ends."""
    n = build(cfg, redis_url, env if env is not None else {SECRET_ENV: SECRET})
    stop = threading.Event()

    async def main() -> None:
        try:
            await n.run(stop.is_set)
        finally:
            await n.client.redis.aclose()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    try:
        yield n
    finally:
        stop.set()
        thread.join(30)
        assert not thread.is_alive(), "the notifier did not stop"
