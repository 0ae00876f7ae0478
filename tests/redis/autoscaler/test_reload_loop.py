"""Config reload (valid and invalid) and the control loop with the dry-run backend."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import redis
import yaml

from autoscaler.backends.base import DryRunBackend
from autoscaler.loop import Autoscaler
from autoscaler.metrics import AutoscalerMetrics
from autoscaler.observe import Observer
from autoscaler.reload import PolicySource
from sluice.config import load_config
from sluice.jobs import NewJob
from sluice.queue import QueueClient
from sluice.queue.client import connect


def _write(path: Path, max_replicas: int | str, bump: int = 0) -> None:
    doc = {
        "models": {
            "m": {
                "handler": "synthetic",
                "autoscaling": {
                    "min_replicas": 0,
                    "max_replicas": max_replicas,
                    "idle_s": 60,
                    "period_s": 1,
                    "service_rate_cost_per_s": 1000,
                },
            }
        }
    }
    path.write_text(yaml.safe_dump(doc))
    st = path.stat()  # make the change visible even within one mtime tick
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000 * (1 + bump)))


def test_reload_applies_a_valid_file_and_keeps_the_last_good_one(tmp_path: Path) -> None:
    path = tmp_path / "sluice.yaml"
    _write(path, 4)
    metrics = AutoscalerMetrics()
    src = PolicySource(path, load_config(path), on_error=lambda _m: metrics.reload_errors.inc())
    assert src.check() is False  # unchanged
    _write(path, 9, bump=1)
    assert src.check() is True and src.policy("m").max_replicas == 9
    _write(path, "lots", bump=2)  # invalid: the field is named, 9 stays in force
    assert src.check() is False
    assert src.policy("m").max_replicas == 9
    assert src.last_error is not None and "max_replicas" in src.last_error
    assert metrics.registry.get_sample_value("sluice_autoscaler_config_reload_errors_total") == 1.0
    path.write_text("models: [unclosed")  # not even YAML
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 9_000_000))
    assert src.check() is False and src.policy("m").max_replicas == 9
    _write(path, 3, bump=20)
    assert src.check() is True and src.policy("m").max_replicas == 3


@pytest.mark.redis
def test_dry_run_loop_wakes_for_work_logs_and_counts(
    tmp_path: Path, redis_url: str, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "sluice.yaml"
    _write(path, 4)
    cfg = load_config(path)
    client = QueueClient(connect(redis_url), dict(cfg.models))
    metrics = AutoscalerMetrics()
    loop = Autoscaler(
        PolicySource(path, cfg), Observer(client, dict(cfg.models)), DryRunBackend(), metrics
    )
    client.submit("m", [NewJob(input="x", bucket="32", cost=10)])
    caplog.set_level(logging.INFO, logger="sluice.autoscaler")
    d = loop.step(now_s=100.0)["m"]
    # No workers, one queued job, no rate yet: wake to one (and never below zero).
    assert (d.current, d.desired, d.reason) == (0, 1, "wake")
    lines = [json.loads(rec.message) for rec in caplog.records if rec.message.startswith("{")]
    assert lines[-1]["model"] == "m" and lines[-1]["desired"] == 1
    assert lines[-1]["event"] == "autoscaler_decision"
    get = metrics.registry.get_sample_value
    assert get("sluice_autoscaler_desired_replicas", {"model": "m"}) == 1.0
    assert (
        get(
            "sluice_autoscaler_decisions_total", {"model": "m", "direction": "up", "reason": "wake"}
        )
        == 1.0
    )
    assert loop.step(now_s=100.5) == {}  # the 1 s period is not due yet


@pytest.mark.redis
def test_loop_holds_when_redis_is_down(tmp_path: Path) -> None:
    path = tmp_path / "sluice.yaml"
    _write(path, 4)
    cfg = load_config(path)
    client = QueueClient(connect("redis://127.0.0.1:1/0", timeout_s=0.2), dict(cfg.models))

    class Two(DryRunBackend):
        def current(self, model: str) -> int:
            return 2

        def scale(self, model: str, desired: int, workers: list) -> None:  # type: ignore[type-arg]
            raise AssertionError("must not act on missing data")

    loop = Autoscaler(PolicySource(path, cfg), Observer(client, dict(cfg.models)), Two())
    d = loop.step(now_s=1.0)["m"]
    assert (d.current, d.desired, d.reason) == (2, 2, "missing-metrics")
    # The reclaim before the read failed too: counted, and it did not stop the period.
    assert (
        loop.metrics.registry.get_sample_value(
            "sluice_autoscaler_reclaim_errors_total", {"model": "m"}
        )
        == 1.0
    )
