"""An idle worker blocks on the wake list: a submit wakes it, a drain still stops it."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from functools import partial

import pytest
import redis

from sluice import keys, registry
from sluice.jobs import JobRecord, JobStatus
from sluice.queue import QueueClient
from tests.kit.workers import MODEL, Running, submit, worker_config
from tests.waits import HUNG_S, blocked_clients, wait_blocked, wait_until
from workers import worker as worker_module
from workers.worker import EXIT_OK, IDLE_WAIT_S

pytestmark = pytest.mark.redis
StartWorker = Callable[..., Running]
LONG_IDLE_S = 30.0
STOP_BOUND_S = 20 * IDLE_WAIT_S  # far above one idle wait; a worker deaf to it never stops


def fast_config():  # type: ignore[no-untyped-def]
    return worker_config("synthetic", {"base_ms": 1, "per_token_ms": 0})


def ready(qc: QueueClient) -> bool:
    ws = qc.run(registry.list_workers_call(MODEL))[0]
    return any(w.state == "ready" for w in ws)


def succeeded(qc: QueueClient, job_id: str) -> JobRecord | None:
    rec = qc.get(job_id)
    return rec if rec.status == JobStatus.SUCCEEDED else None


def test_an_idle_worker_picks_up_a_new_job_promptly(
    r: redis.Redis, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 30 s idle wait: a job started well before it proves the submit's token woke
    # the worker, however slow the machine (a polling worker would start it ~30 s late).
    monkeypatch.setattr(worker_module, "IDLE_WAIT_S", LONG_IDLE_S)
    cfg = fast_config()
    qc = QueueClient(r, dict(cfg.models))
    before = blocked_clients(r)
    run = start_worker(cfg, redis_timeout_s=3 * LONG_IDLE_S)
    wait_until(lambda: ready(qc))
    waits = []
    for _ in range(4):
        wait_blocked(r, before)  # idle again, blocked on its wake lists
        job = submit(qc, cfg, ["a b c"])[0]
        rec = wait_until(partial(succeeded, qc, job), timeout_s=LONG_IDLE_S / 2)
        assert rec.started_at_ms is not None
        waits.append(rec.started_at_ms - rec.queued_at_ms)
    assert max(waits) < LONG_IDLE_S * 1000 / 2, waits
    wait_blocked(r, before)
    run.worker.drain("test")
    for bucket in cfg.model(MODEL).buckets:  # end its 30 s wait now
        r.lpush(keys.wake_key(MODEL, str(bucket)), "1")
    assert run.join(HUNG_S) == EXIT_OK


def test_drain_stops_an_idle_worker_within_its_wait(
    r: redis.Redis, start_worker: StartWorker
) -> None:
    cfg = fast_config()
    qc = QueueClient(r, dict(cfg.models))
    before = blocked_clients(r)
    run = start_worker(cfg)
    wait_until(lambda: ready(qc))
    wait_blocked(r, before)  # idle, blocked on its wake lists
    t0 = time.monotonic()
    run.worker.drain("test")
    assert run.join(HUNG_S) == EXIT_OK
    # Acted on at the end of its 0.5 s wait; the bound only fails a worker that hung.
    assert time.monotonic() - t0 < STOP_BOUND_S


@pytest.mark.system
def test_sigterm_stops_an_idle_worker_process_within_about_a_second(
    r: redis.Redis,
    spawn: Callable[..., subprocess.Popen[bytes]],
) -> None:
    cfg = fast_config()
    qc = QueueClient(r, dict(cfg.models))
    before = blocked_clients(r)
    proc = spawn(cfg, "--metrics-port", "-1")
    wait_until(lambda: ready(qc), timeout_s=30)
    wait_blocked(r, before)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(HUNG_S) == 0
    assert time.monotonic() - t0 < STOP_BOUND_S
    assert not ready(qc)  # deregistered on the way out
