"""Config validation: every bad value is named with its field."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.config import load_config, parse_config, resolve_redis_url
from sluice.errors import ConfigError
from tests.conftest import EXAMPLE_CONFIG

ROOT = Path(__file__).resolve().parents[3]


def test_example_config_is_valid_and_has_the_two_models() -> None:
    cfg = load_config(EXAMPLE_CONFIG)
    assert cfg.models["minilm"].handler == "embedding"
    assert cfg.models["synthetic"].handler == "synthetic"
    assert cfg.models["minilm"].bucket_names == ["32", "128", "512"]


def test_defaults_are_production_safe() -> None:
    cfg = parse_config({"models": {"m": {"handler": "tiny"}}})
    m = cfg.models["m"]
    assert m.autoscaling.target_utilization == 0.65
    assert m.autoscaling.scale_down_window_s == 300
    assert m.batching.max_attempts == 3 and m.batching.lease_s > 0
    assert m.queue.priority_weights == {"high": 4.0, "normal": 2.0, "low": 1.0}


@pytest.mark.parametrize(
    ("model", "needle"),
    [
        ({"handler": "x", "buckets": [128, 32]}, "models.m.buckets = [128, 32]"),
        ({"handler": "x", "buckets": []}, "at least one bucket"),
        ({"handler": "x", "batching": {"max_batch": 0}}, "models.m.batching.max_batch = 0"),
        ({"handler": "x", "batching": {"lease_s": -1}}, "models.m.batching.lease_s = -1"),
        (
            {"handler": "x", "autoscaling": {"min_replicas": 4, "max_replicas": 2}},
            "max_replicas (2) < min_replicas (4)",
        ),
        (
            {"handler": "x", "batching": {"max_batch_tokens": 100}, "buckets": [32, 512]},
            "max_batch_tokens (100) < the largest bucket (512)",
        ),
        ({"handler": "x", "queue": {"priority_weights": {"urgent": 2}}}, "unknown priority"),
        ({"handler": "x", "typo_field": 1}, "models.m.typo_field"),
        ({}, "models.m.handler: field required"),
    ],
)
def test_bad_values_name_the_field(model: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config({"models": {"m": model}}, "f.yaml")
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)


def test_bad_model_name_and_empty_models() -> None:
    with pytest.raises(ConfigError, match="model name 'Bad.Name'"):
        parse_config({"models": {"Bad.Name": {"handler": "x"}}})
    with pytest.raises(ConfigError, match="at least one model"):
        parse_config({"models": {}})


def test_unreadable_and_non_yaml_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(bad)


def test_redis_url_precedence() -> None:
    cfg = parse_config({"redis_url": "redis://file:1/0", "models": {"m": {"handler": "x"}}})
    assert resolve_redis_url("redis://cli:2/0", cfg) == "redis://cli:2/0"
    assert resolve_redis_url(None, cfg) == "redis://file:1/0"
    assert resolve_redis_url(None, None).startswith("redis://127.0.0.1")


def test_docs_config_mentions_every_core_field() -> None:
    from sluice.config import (
        BatchingConfig,
        BulkConfig,
        CostConfig,
        ModelBulkConfig,
        QueueConfig,
        WebhooksConfig,
    )

    doc = (ROOT / "docs" / "config.md").read_text()
    sections = (
        QueueConfig,
        BatchingConfig,
        CostConfig,
        BulkConfig,
        ModelBulkConfig,
        WebhooksConfig,
    )
    for section in sections:
        for field in section.model_fields:
            assert f"`{field}`" in doc, f"docs/config.md does not document {field}"
