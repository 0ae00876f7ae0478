"""An idle worker blocks on the wake list: a submit wakes it, a drain still stops it."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

import pytest
import redis

from sluice import registry
from sluice.jobs import JobStatus
from sluice.queue import QueueClient
from tests.workers.conftest import MODEL, Running, submit, wait_for, worker_config
from tests.workers.test_process import spawn  # noqa: F401 - the fixture
from workers.worker import EXIT_OK, IDLE_WAIT_S

pytestmark = pytest.mark.redis
StartWorker = Callable[..., Running]


def fast_config():  # type: ignore[no-untyped-def]
    return worker_config("synthetic", {"base_ms": 1, "per_token_ms": 0})


def ready(qc: QueueClient) -> bool:
    ws = qc.run(registry.list_workers_call(MODEL))[0]
    return any(w.state == "ready" for w in ws)


def test_an_idle_worker_picks_up_a_new_job_promptly(
    r: redis.Redis, start_worker: StartWorker
) -> None:
    cfg = fast_config()
    qc = QueueClient(r, dict(cfg.models))
    start_worker(cfg)
    wait_for(lambda: ready(qc))
    time.sleep(1.0)  # idle: with a polling back-off it would now sleep its longest
    waits = []
    for _ in range(4):
        job = submit(qc, cfg, ["a b c"])[0]
        rec = wait_for(lambda j=job: (x := qc.get(j)).status == JobStatus.SUCCEEDED and x)
        assert rec.started_at_ms is not None
        waits.append(rec.started_at_ms - rec.queued_at_ms)
        time.sleep(IDLE_WAIT_S * 1.5)  # past a whole idle timeout each time
    # Woken by the submit's token, not by the 500 ms timeout (generous: shared CI box).
    assert max(waits) < 200, waits


def test_drain_stops_an_idle_worker_within_its_wait(
    r: redis.Redis, start_worker: StartWorker
) -> None:
    cfg = fast_config()
    qc = QueueClient(r, dict(cfg.models))
    run = start_worker(cfg)
    wait_for(lambda: ready(qc))
    time.sleep(1.0)
    t0 = time.monotonic()
    run.worker.drain("test")
    assert run.join(5) == EXIT_OK
    assert time.monotonic() - t0 < IDLE_WAIT_S + 0.7


@pytest.mark.slow
def test_sigterm_stops_an_idle_worker_process_within_about_a_second(
    r: redis.Redis,
    spawn: Callable[..., subprocess.Popen[bytes]],  # noqa: F811
) -> None:
    cfg = fast_config()
    qc = QueueClient(r, dict(cfg.models))
    proc = spawn(cfg, "--metrics-port", "-1")
    wait_for(lambda: ready(qc), timeout_s=30)
    time.sleep(1.0)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    assert time.monotonic() - t0 < 1.5
    assert not ready(qc)  # deregistered on the way out
