"""The gateway process's GC settings (gateway.app.app_from_env, ADR 0176): the start-up
objects frozen and the youngest generation collected at GC_GEN0_THRESHOLD, unless
SLUICE_GATEWAY_GC_FREEZE=0 leaves Python's settings alone."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gateway.app import GC_FREEZE_ENV, GC_GEN0_THRESHOLD, app_from_env
from sluice.envnames import CONFIG_ENV, REDIS_URL_ENV


@pytest.fixture
def gateway_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    cfg = tmp_path / "sluice.yaml"
    cfg.write_text(yaml.safe_dump({"models": {"m": {"handler": "synthetic"}}}))
    monkeypatch.setenv(CONFIG_ENV, str(cfg))
    monkeypatch.setenv(REDIS_URL_ENV, "redis://127.0.0.1:1/0")  # never connected here
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@pytest.mark.parametrize("freeze", ["1", "0"])
def test_the_young_generation_threshold_is_raised_with_the_freeze(
    gateway_env: None, freeze: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(GC_FREEZE_ENV, freeze)
    gc.set_threshold(700, 10, 10)
    app_from_env()
    if freeze == "1":
        assert gc.get_threshold() == (GC_GEN0_THRESHOLD, 10, 10) and gc.get_freeze_count() > 0
    else:
        assert gc.get_threshold() == (700, 10, 10)
