"""Shared test data: a worker record and a config, each written once, so a test
names only the fields it is about."""

from __future__ import annotations

from typing import Any

from sluice.config import SluiceConfig, parse_config
from sluice.registry import WorkerInfo


def worker_info(**overrides: Any) -> WorkerInfo:
    """Worker ``w1`` of model ``m``: ready on one CPU, bucket 32, started at 0.0."""
    fields: dict[str, Any] = {
        "id": "w1",
        "model": "m",
        "host": "h",
        "pid": 1,
        "device": "cpu",
        "buckets": ["32"],
        "state": "ready",
        "started_at": 0.0,
    }
    return WorkerInfo(**(fields | overrides))


def sluice_config(model: dict[str, Any] | None = None, **sections: Any) -> SluiceConfig:
    """Model ``m`` (synthetic, or causal-lm with a ``generate`` section; buckets
    32/128/512) updated by ``model``; ``sections``
    are the config's other top-level sections (``webhooks=...``, ``auth=...``)."""
    model = model or {}
    handler = "causal-lm" if "generate" in model else "synthetic"  # generate: needs an engine
    m: dict[str, Any] = {"handler": handler, "buckets": [32, 128, 512], **model}
    return parse_config({"models": {"m": m}, **sections})
