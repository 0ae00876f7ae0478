"""A job this worker completed is never reported lost, whichever of its completion
and a lease renewal reaches Redis first; a lease another worker took still is."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import redis

from sluice import keys
from sluice.errors import NotReplicated
from sluice.jobs import NewJob, Outcome
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.registry import WorkerInfo
from tests.factories import worker_info
from tests.kit.workers import submit, worker_config
from tests.waits import wait_until
from workers.handlers import HandlerContext, make_handler
from workers.housekeeping import Housekeeper
from workers.outcomes import send_outcomes
from workers.status import WorkerStatus
from workers.worker import Worker, WorkerOptions


def _info(worker_id: str) -> WorkerInfo:
    return worker_info(id=worker_id)


class FinishesDuringRenewal:
    """Renewal stand-in: the batch completes (and its leases go) while the call is out."""

    def __init__(self, status: WorkerStatus, finished: list[str]) -> None:
        self.status, self.finished = status, finished

    def renew_why(self, model: str, worker_id: str, job_ids: list[str]) -> dict[str, str]:
        self.status.release(self.finished)  # the complete landed first
        return dict.fromkeys(self.finished, "lost")  # so Redis no longer has their leases


def test_jobs_completed_during_the_renewal_are_not_lost(caplog: pytest.LogCaptureFixture) -> None:
    status = WorkerStatus(_info("w1"))
    status.hold(["m.a", "m.b", "m.c"])
    client = FinishesDuringRenewal(status, ["m.a", "m.b"])
    hk = Housekeeper(
        client,
        status,
        heartbeat_s=1.0,
        ttl_s=2.0,
        lease_s=3.0,  # type: ignore[arg-type]
        on_command=lambda c: None,
    )
    with caplog.at_level(logging.WARNING):
        hk.renew()
    assert list(hk.lost) == []
    assert "lost the lease" not in caplog.text


# -- against a real Redis ----------------------------------------------------------
# Under `durability: replica` a completion's script has ended the jobs on the primary
# while its WAIT is still out; a renewal in that window finds them ended. These tests
# put the renewal exactly there instead of hoping a timer lands in it.

MODEL = "m"


class RenewsMidCompletion(QueueClient):
    """A client whose completion has run its script but not yet returned (as while a
    WAIT for the replica is out) when the worker's housekeeping renews its leases."""

    during: Callable[[], None] = staticmethod(lambda: None)

    def complete(self, model: str, outcomes: Any, worker_id: str = "") -> tuple[int, int]:
        reply = super().complete(model, outcomes, worker_id)
        self.during()
        return reply


def test_a_renewal_during_an_unreturned_completion_reports_nothing_lost(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = worker_config("tiny")
    client = RenewsMidCompletion(connect(redis_url), dict(cfg.models))
    ids = submit(client, cfg, ["a b", "c d", "e f"])
    opts = WorkerOptions(model=MODEL, burst=True, overlap=False, metrics_port=-1)
    handler = make_handler(HandlerContext(MODEL, cfg.model(MODEL)))
    worker = Worker(cfg, client, handler, opts)
    renewed: list[list[str]] = []  # what Redis answered each mid-completion renewal

    def renew_now() -> None:
        renewed.append(client.renew(MODEL, worker.id, worker.status.held()))
        worker.housekeeper.renew()

    client.during = renew_now
    try:
        with caplog.at_level(logging.WARNING, logger="sluice.worker"):
            assert worker.run() == 0
    finally:
        client.redis.close()
    assert sorted(sum(renewed, [])) == sorted(ids)  # the renewals did find them ended
    assert list(worker.housekeeper.lost) == []
    assert "lost the lease" not in caplog.text


def test_a_lease_taken_by_another_worker_is_still_reported_lost(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = worker_config("tiny")
    qc = QueueClient(r, dict(cfg.models))
    stolen, kept = submit(qc, cfg, ["a b", "c d"])
    assert {j.id for j in qc.claim(MODEL, "w1").jobs} == {stolen, kept}
    status = WorkerStatus(_info("w1"))
    status.hold([stolen, kept])
    # Its lease lapses; another worker's claim reclaims it and takes it.
    r.zadd(keys.inflight_key(MODEL), {stolen: 0})
    assert qc.reclaim(MODEL) == 1
    # (once its retry backoff has passed)
    taken = wait_until(lambda: qc.claim(MODEL, "w2").jobs, what="the retry is claimable")
    assert [j.id for j in taken] == [stolen]
    hk = Housekeeper(qc, status, heartbeat_s=1.0, ttl_s=2.0, lease_s=3.0, on_command=print)
    # Even while a completion of its other job is out, the stolen one is reported.
    status.ending([kept])
    with caplog.at_level(logging.WARNING, logger="sluice.worker"):
        hk.renew()
    assert list(hk.lost) == [stolen]
    assert "lost the lease of 1 job(s)" in caplog.text


class AppliedButNotReplicated:
    """A client whose first complete runs on the primary, then its replica wait times
    out (NotReplicated): the worker resends, as under queue.durability replica."""

    def __init__(self, real: QueueClient) -> None:
        self.real, self.calls = real, 0

    def complete(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        self.calls += 1
        done = self.real.complete(*args, **kwargs)
        if self.calls == 1:
            raise NotReplicated("no replica confirmed the write in time")
        return done


def test_a_resend_after_a_replica_timeout_is_no_stale_warning(
    queue_factory: Callable[..., QueueClient], caplog: pytest.LogCaptureFixture
) -> None:
    q = queue_factory()
    [job] = q.submit("m", [NewJob("a", "32", 1)])
    batch = q.claim("m", "w1")
    assert batch is not None and [j.id for j in batch.jobs] == [job.id]
    client = AppliedButNotReplicated(q)
    with caplog.at_level(logging.INFO, logger="sluice.worker"):
        sent = send_outcomes(
            client,  # type: ignore[arg-type]
            "m",
            "w1",
            [Outcome.ok(job.id, [1.0])],
            delays=(0.0,),
        )
    assert sent and client.calls == 2
    assert q.redis.hget(keys.job_key("m", job.id), "status") in (b"succeeded", "succeeded")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "stale" in r.message]
    assert any("already applied" in r.message for r in caplog.records)
