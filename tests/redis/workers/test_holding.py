"""Holding jobs safely: complete as the holder, release what never ran, survive a
Redis that refuses writes, and publish busy while any lease is held."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import redis

from sluice import registry
from sluice.config import SluiceConfig
from sluice.jobs import JobStatus, Outcome
from sluice.queue import QueueClient
from tests.kit.workers import MODEL, Running, submit, worker_config
from tests.waits import wait_until
from workers.handlers import HandlerContext, make_handler
from workers.worker import EXIT_QUARANTINED, Worker, WorkerOptions

pytestmark = pytest.mark.redis
StartWorker = Callable[..., Running]


def client(r: redis.Redis, cfg: SluiceConfig) -> QueueClient:
    return QueueClient(r, dict(cfg.models))


def idle_worker(r: redis.Redis, cfg: SluiceConfig, overlap: bool = False) -> Worker:
    """A worker built but not started: tests call its methods or ``run`` themselves."""
    handler = make_handler(HandlerContext(MODEL, cfg.model(MODEL)))
    opts = WorkerOptions(model=MODEL, worker_id="w-me", overlap=overlap, metrics_port=-1)
    return Worker(cfg, client(r, cfg), handler, opts)


def workers_of(qc: QueueClient) -> list[registry.WorkerInfo]:
    return qc.run(registry.list_workers_call(MODEL))[0]


@contextmanager
def writes_refused(r: redis.Redis, for_s: float | None = None) -> Iterator[None]:
    """Redis answers writes with OOM (maxmemory 1, noeviction), as under memory
    pressure; restored after ``for_s`` seconds (in a timer) or on exit."""
    old = r.config_get("maxmemory*")
    restored = threading.Event()

    def restore() -> None:
        if not restored.is_set():
            restored.set()
            r.config_set("maxmemory", old["maxmemory"])
            r.config_set("maxmemory-policy", old["maxmemory-policy"])

    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", 1)
    timer = threading.Timer(for_s, restore) if for_s is not None else None
    try:
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            r.set("probe", "x")  # the fault is real
        if timer is not None:
            timer.start()
        yield
    finally:
        if timer is not None and timer.is_alive():
            timer.join()
        restore()


def test_a_late_give_back_leaves_the_job_with_its_new_holder(r: redis.Redis) -> None:
    cfg = worker_config("synthetic")
    qc = client(r, cfg)
    [job_id] = submit(qc, cfg, ["a b"])
    assert [j.id for j in qc.claim(MODEL, "w-other").jobs] == [job_id]
    me = idle_worker(r, cfg)  # as if our lease had lapsed and w-other took the job
    me._complete([Outcome.retry(job_id, "worker_error", "late")])
    rec = qc.get(job_id)
    assert (rec.status, rec.worker, rec.attempts) == (JobStatus.RUNNING, "w-other", 1)
    assert qc.stats(MODEL).in_flight == 1 and qc.stats(MODEL).counters.get("retried", 0) == 0


def test_complete_rides_out_redis_refusing_writes(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = worker_config("synthetic")
    qc = client(r, cfg)
    [job_id] = submit(qc, cfg, ["a b"])
    me = idle_worker(r, cfg)
    qc.claim(MODEL, me.id)
    with caplog.at_level(logging.WARNING, "sluice.worker"), writes_refused(r, for_s=0.5):
        assert me._complete([Outcome.ok(job_id, {"v": 1})])  # OOM first, then accepted
    assert "could not send 1 outcome" in caplog.text
    rec = qc.get(job_id)
    assert (rec.status, rec.result) == (JobStatus.SUCCEEDED, {"v": 1})


def test_complete_gives_up_with_an_error_naming_the_jobs(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = worker_config("synthetic")
    qc = client(r, cfg)
    ids = submit(qc, cfg, ["a b", "c d"])
    me = idle_worker(r, cfg)
    me.complete_backoff_s = (0.01, 0.01)
    qc.claim(MODEL, me.id)
    with caplog.at_level(logging.ERROR, "sluice.worker"), writes_refused(r):
        assert not me._complete([Outcome.ok(i, 1) for i in ids])
    errors = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.ERROR]
    assert len(errors) == 1 and all(i in errors[0] for i in ids) and "3 tries" in errors[0]
    assert qc.stats(MODEL).in_flight == 2  # nothing was applied: the leases will lapse


def test_quarantine_releases_its_prefetch_without_using_an_attempt(
    r: redis.Redis, start_worker: StartWorker
) -> None:
    # One attempt each: a hand-back counted as a retry would dead-letter jobs that
    # never ran. The first batch ran (and failed); the prefetched one did not.
    cfg = worker_config(
        "tests.kit.fault_handlers:BrokenHandler",
        batching={"max_batch": 2, "max_attempts": 1},
        worker={"quarantine_after_failures": 1, "quarantine_grace_s": 0.2},
    )
    qc = client(r, cfg)
    ids = submit(qc, cfg, [f"job {i}" for i in range(6)])
    assert start_worker(cfg, overlap=True).join() == EXIT_QUARANTINED
    stats = qc.stats(MODEL)
    assert stats.counters.get("failed", 0) == 2 and len(qc.dead_letters(MODEL)) == 2
    assert (stats.queued, stats.in_flight) == (4, 0)
    queued = [rec for rec in map(qc.get, ids) if rec.status == JobStatus.QUEUED]
    assert len(queued) == 4 and all(rec.attempts == 0 for rec in queued)


def test_an_error_in_the_loop_releases_the_prefetched_batch(r: redis.Redis) -> None:
    cfg = worker_config("synthetic", {"base_ms": 200, "per_token_ms": 0}, batching={"max_batch": 2})
    qc = client(r, cfg)
    ids = submit(qc, cfg, ["x"] * 6)
    w = idle_worker(r, cfg, overlap=True)

    def bug(*_: object) -> None:
        raise RuntimeError("a bug after the batch")

    w._account = bug  # type: ignore[method-assign]
    raised: list[BaseException] = []

    def target() -> None:
        try:
            w.run()
        except RuntimeError as e:
            raised.append(e)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive() and len(raised) == 1
    stats = qc.stats(MODEL)
    assert stats.counters.get("succeeded") == 2  # the batch that ran
    assert (stats.queued, stats.in_flight) == (4, 0)  # the prefetch went straight back
    queued = [rec for rec in map(qc.get, ids) if rec.status == JobStatus.QUEUED]
    assert len(queued) == 4 and all(rec.attempts == 0 for rec in queued)


def test_housekeeping_survives_redis_refusing_writes(
    r: redis.Redis, start_worker: StartWorker
) -> None:
    # A 3 s batch on a 1.5 s lease (ticks every 0.2 s): renewals and heartbeats are
    # refused (OOM) for 0.6 s, then must resume before the old lease runs out.
    cfg = worker_config(
        "synthetic", {"base_ms": 3000, "per_token_ms": 0}, batching={"lease_s": 1.5}
    )
    qc = client(r, cfg)
    ids = submit(qc, cfg, ["x"] * 2)
    run = start_worker(cfg, overlap=False)
    wait_until(lambda: qc.stats(MODEL).in_flight == 2)
    with writes_refused(r, for_s=0.6):
        pass  # the timer restores writes; leaving the block waits for it
    restored_at = time.time()
    time.sleep(1.2)  # 1.8 s after the fault began: any lease renewed before it is gone
    assert run.worker.housekeeper._thread.is_alive()
    assert qc.reclaim(MODEL) == 0  # renewed since the fault: no lease lapsed
    [info] = workers_of(qc)
    assert info.heartbeat_at > restored_at and info.busy and info.extra["held"] == 2
    wait_until(lambda: qc.stats(MODEL).counters.get("succeeded") == 2, timeout_s=5)
    assert [qc.get(i).attempts for i in ids] == [1, 1]


def test_busy_while_holding_a_prefetched_lease_between_batches(
    r: redis.Redis, start_worker: StartWorker
) -> None:
    # Inference is instant, collating takes 300 ms: after each batch the main thread
    # waits for the prefetch thread, which already holds the next batch's leases.
    cfg = worker_config(
        "tests.kit.fault_handlers:SlowCollateHandler",
        {"base_ms": 0, "per_token_ms": 0, "collate_ms": 300},
        batching={"max_batch": 1},
    )
    qc = client(r, cfg)
    submit(qc, cfg, ["x"] * 4)
    run = start_worker(cfg, overlap=True)
    status = run.worker.status
    busy_while_held: list[bool] = []
    deadline = time.monotonic() + 6
    while qc.stats(MODEL).counters.get("succeeded", 0) < 4 and time.monotonic() < deadline:
        before, info, after = status.held(), status.snapshot(), status.held()
        if before and before == after:  # ids are unique: held all along the snapshot
            busy_while_held.append(info.busy and info.extra["held"] == len(before))
        time.sleep(0.01)
    assert len(busy_while_held) > 20 and all(busy_while_held)
    idle = wait_until(lambda: [w for w in workers_of(qc) if w.jobs == 4])[0]
    assert (idle.busy, idle.extra["held"]) == (False, 0)  # what the heartbeat published
