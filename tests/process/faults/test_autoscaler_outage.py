"""The autoscaler loop through a Redis outage: it holds the current count (never
scales down on a failed read), logs the outage once, and decides again after."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
import yaml

from autoscaler.backends.base import DryRunBackend
from autoscaler.loop import Autoscaler
from autoscaler.metrics import AutoscalerMetrics
from autoscaler.observe import Observer
from autoscaler.reload import PolicySource
from sluice.config import load_config
from sluice.local.redis_server import free_port
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.registry import WorkerInfo
from tests.kit.faults import Redis

pytestmark = [pytest.mark.system]


class Fixed(DryRunBackend):
    """Three replicas running; records every scale request."""

    def __init__(self) -> None:
        super().__init__()
        self.replicas = 3
        self.requests: list[int] = []

    def current(self, model: str) -> int:
        return self.replicas

    def scale(self, model: str, desired: int, workers: list[WorkerInfo]) -> None:
        self.requests.append(desired)
        self.replicas = desired


def test_autoscaler_holds_through_a_redis_outage_then_scales_down(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "sluice.yaml"
    # Idle with 3 replicas and no stabilisation window: any good read scales down.
    path.write_text(
        yaml.safe_dump(
            {
                "models": {
                    "m": {
                        "handler": "synthetic",
                        "autoscaling": {
                            "min_replicas": 1,
                            "max_replicas": 4,
                            "period_s": 0.2,
                            "scale_down_window_s": 0,
                            "metrics_window_s": 2,
                            "service_rate_cost_per_s": 1000,
                        },
                    }
                }
            }
        )
    )
    cfg = load_config(path)
    server = Redis(free_port(), None).start()
    try:
        client = QueueClient(connect(server.url, timeout_s=1.0), dict(cfg.models))
        backend = Fixed()
        loop = Autoscaler(
            PolicySource(path, cfg),
            Observer(client, dict(cfg.models)),
            backend,
            AutoscalerMetrics(),
        )
        server.kill9()
        with caplog.at_level(logging.WARNING, "sluice.autoscaler"):
            held = []
            for i in range(15):  # 3 s of periods with Redis gone
                d = loop.step(now_s=100.0 + i * 0.2)
                held += [(x.current, x.desired) for x in d.values()]
                time.sleep(0.05)
        assert len(held) >= 10 and set(held) == {(3, 3)}
        assert backend.requests == []  # a failed read never scales down
        # Reclaim, read and decision record: each once per outage, not once per period.
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 3 and all("retrying with backoff" in m for m in said), said
        server.start()  # back, empty and idle: now the same loop scales down
        for i in range(60):  # rates need a second or two of samples first
            loop.step(now_s=200.0 + i * 0.2)
            if backend.requests:
                break
            time.sleep(0.1)
        assert backend.requests and backend.requests[0] < 3
    finally:
        server.stop()
