"""Warm-pool workers on a real Redis: parked workers never claim; promote, park, drain.

docs/adr/0128. The commands go through the worker's control list exactly as the
autoscaler sends them (registry.send_control).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from sluice import registry
from sluice.jobs import JobStatus
from sluice.queue import QueueClient
from tests.kit.workers import MODEL, Running, submit, worker_config
from tests.waits import wait_until
from workers.startpath import STAGES
from workers.worker import EXIT_OK

pytestmark = pytest.mark.redis
StartWorker = Callable[..., Running]
SYNTH = {"base_ms": 1, "per_token_ms": 0.01}


def _send(r: redis.Redis, worker_id: str, command: str) -> None:
    pipe = r.pipeline()
    for cmd in registry.send_control(MODEL, worker_id, command):
        pipe.execute_command(*cmd)
    pipe.execute()


def _info(qc: QueueClient, worker_id: str) -> registry.WorkerInfo | None:
    live = qc.run(registry.list_workers_call(MODEL))[0]
    return next((w for w in live if w.id == worker_id), None)


def _state(qc: QueueClient, worker_id: str, state: str) -> Any:
    return wait_until(lambda: (i := _info(qc, worker_id)) is not None and i.state == state and i)


def test_a_parked_worker_claims_nothing_until_promoted(
    r: redis.Redis, start_worker: StartWorker
) -> None:
    cfg = worker_config("synthetic", SYNTH)
    qc = QueueClient(r, dict(cfg.models))
    ids = submit(qc, cfg, ["a b c"] * 10)
    run = start_worker(cfg, parked=True)
    info = _state(qc, run.worker.id, "standby")
    assert info.parked and info.jobs == 0
    # Heartbeats keep coming while parked; the jobs stay queued through several of them.
    first = info.heartbeat_at
    wait_until(lambda: (i := _info(qc, run.worker.id)) is not None and i.heartbeat_at > first + 0.4)
    assert all(qc.get(i).status == JobStatus.QUEUED for i in ids)
    assert qc.stats(MODEL).counters.get("claimed", 0) == 0
    _send(r, run.worker.id, registry.PROMOTE)
    wait_until(lambda: all(qc.get(i).status == JobStatus.SUCCEEDED for i in ids))
    info = wait_until(lambda: (i := _info(qc, run.worker.id)) and "promote_s" in i.extra and i)
    assert info.state == "ready" and not info.parked
    assert 0 <= info.extra["promote_s"] < 10  # measured: command to the first claim's reply
    # A parked worker's start path stops before its first claim: that is the promotion's.
    assert "first_claim" not in info.extra["start_path"]


def test_park_sends_a_serving_worker_back_to_standby_and_promote_brings_it_back(
    r: redis.Redis, start_worker: StartWorker
) -> None:
    cfg = worker_config("synthetic", SYNTH)
    qc = QueueClient(r, dict(cfg.models))
    run = start_worker(cfg)
    _state(qc, run.worker.id, "ready")
    _send(r, run.worker.id, registry.PARK)
    parked = _state(qc, run.worker.id, "standby")
    ids = submit(qc, cfg, ["x y"] * 6)
    later = parked.heartbeat_at + 0.4  # two heartbeats on, the jobs are still queued
    wait_until(lambda: (i := _info(qc, run.worker.id)) is not None and i.heartbeat_at > later)
    assert all(qc.get(i).status == JobStatus.QUEUED for i in ids)
    _send(r, run.worker.id, registry.PROMOTE)
    wait_until(lambda: all(qc.get(i).status == JobStatus.SUCCEEDED for i in ids))
    assert _info(qc, run.worker.id).state == "ready"  # type: ignore[union-attr]


def test_draining_a_parked_worker_exits_zero_and_deregisters(
    r: redis.Redis, start_worker: StartWorker
) -> None:
    cfg = worker_config("synthetic", SYNTH)
    qc = QueueClient(r, dict(cfg.models))
    run = start_worker(cfg, parked=True)
    _state(qc, run.worker.id, "standby")
    _send(r, run.worker.id, registry.DRAIN)
    assert run.join() == EXIT_OK
    assert _info(qc, run.worker.id) is None


def test_a_promote_sent_while_loading_starts_the_worker_claiming(
    r: redis.Redis, start_worker: StartWorker
) -> None:
    # The command waits in the list; the housekeeper's first beat (or the park loop)
    # takes it, and the worker goes straight to ready.
    cfg = worker_config("synthetic", SYNTH)
    qc = QueueClient(r, dict(cfg.models))
    _send(r, "w-early", registry.PROMOTE)
    ids = submit(qc, cfg, ["p q"] * 3)
    run = start_worker(cfg, parked=True, worker_id="w-early")
    wait_until(lambda: all(qc.get(i).status == JobStatus.SUCCEEDED for i in ids))
    # Promoted before it was loaded: its first claim ends its start path; it reports
    # no promotion time (that would be the rest of its load, not a promotion).
    info = wait_until(
        lambda: (i := _info(qc, run.worker.id)) and "first_claim" in i.extra["start_path"] and i
    )
    assert "promote_s" not in info.extra


def test_the_start_path_is_in_the_heartbeat_and_metrics(
    r: redis.Redis, start_worker: StartWorker
) -> None:
    cfg = worker_config("synthetic", SYNTH)
    qc = QueueClient(r, dict(cfg.models))
    run = start_worker(cfg)
    info = wait_until(
        lambda: (
            (i := _info(qc, run.worker.id)) and "first_claim" in i.extra.get("start_path", {}) and i
        )
    )
    path = info.extra["start_path"]
    assert set(path) <= set(STAGES) and {"weights_read", "warmup", "first_claim"} <= set(path)
    assert all(v >= 0 for v in path.values())
    labels = {"model": MODEL, "stage": "first_claim"}
    exported = run.worker.metrics.registry.get_sample_value("sluice_worker_start_seconds", labels)
    assert exported == path["first_claim"]


@pytest.mark.parametrize("weights", ["host", "device"])
def test_host_parking_moves_the_weights_off_and_back_on_promotion(
    r: redis.Redis, start_worker: StartWorker, weights: str
) -> None:
    cfg = worker_config("tests.kit.fault_handlers:ParkRecordingHandler", SYNTH)
    mc = cfg.models[MODEL]
    pool = mc.autoscaling.warm_pool.model_copy(update={"weights": weights})
    auto = mc.autoscaling.model_copy(update={"warm_pool": pool})
    cfg = cfg.model_copy(update={"models": {MODEL: mc.model_copy(update={"autoscaling": auto})}})
    qc = QueueClient(r, dict(cfg.models))
    run = start_worker(cfg, parked=True)
    _state(qc, run.worker.id, "standby")
    handler = run.worker.handler
    assert handler.calls == (["park"] if weights == "host" else [])  # type: ignore[attr-defined]
    _send(r, run.worker.id, registry.PROMOTE)
    ids = submit(qc, cfg, ["a b"] * 4)
    wait_until(lambda: all(qc.get(i).status == JobStatus.SUCCEEDED for i in ids))
    want = ["park", "unpark"] if weights == "host" else []
    assert handler.calls == want  # type: ignore[attr-defined]
