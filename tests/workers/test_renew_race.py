"""A job that completes while a lease renewal is on its way is not reported lost."""

from __future__ import annotations

import logging

import pytest

from sluice.registry import WorkerInfo
from workers.housekeeping import Housekeeper
from workers.status import WorkerStatus


class FinishesDuringRenewal:
    """Renewal stand-in: the batch completes (and its leases go) while the call is out."""

    def __init__(self, status: WorkerStatus, finished: list[str]) -> None:
        self.status, self.finished = status, finished

    def renew(self, model: str, worker_id: str, job_ids: list[str]) -> list[str]:
        self.status.release(self.finished)  # the complete landed first
        return list(self.finished)  # so Redis no longer has their leases


def test_jobs_completed_during_the_renewal_are_not_lost(caplog: pytest.LogCaptureFixture) -> None:
    info = WorkerInfo(
        id="w1",
        model="m",
        host="h",
        pid=1,
        device="cpu",
        buckets=["32"],
        state="ready",
        started_at=0.0,
    )
    status = WorkerStatus(info)
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
