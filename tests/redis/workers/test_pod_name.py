"""A worker names its Kubernetes pod in every heartbeat (SLUICE_POD_NAME)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from sluice import registry
from sluice.config import POD_NAME_ENV
from sluice.queue import QueueClient
from tests.kit.workers import MODEL, Running, submit, worker_config
from tests.waits import wait_until

pytestmark = pytest.mark.redis
# Longer than a host name may be (63): the kubelet truncates the pod's host name.
POD = "sluice-worker-minilm-with-a-long-deployment-name-7f9c6d8b5-x2k9q-zz"


def _live(qc: QueueClient) -> list[registry.WorkerInfo]:
    return qc.run(registry.list_workers_call(MODEL))[0]


def test_heartbeat_carries_the_pod_name_from_the_environment(
    r: redis.Redis, start_worker: Callable[..., Running], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert len(POD) > 63
    monkeypatch.setenv(POD_NAME_ENV, POD)
    cfg = worker_config("synthetic", {"base_ms": 1, "per_token_ms": 0.01})
    qc = QueueClient(r, dict(cfg.models))
    submit(qc, cfg, ["a b c"] * 10)
    start_worker(cfg)
    # After batches too: the batch loop rewrites the heartbeat's other fields.
    info = wait_until(lambda: [w for w in _live(qc) if w.jobs == 10])[0]
    assert info.pod_name == POD


def test_no_pod_name_outside_kubernetes(
    r: redis.Redis, start_worker: Callable[..., Running], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(POD_NAME_ENV, raising=False)
    cfg = worker_config("synthetic", {"base_ms": 1, "per_token_ms": 0.01})
    qc = QueueClient(r, dict(cfg.models))
    start_worker(cfg)
    info = wait_until(lambda: _live(qc))[0]
    assert info.pod_name == "" and info.host
