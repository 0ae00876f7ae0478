"""Worker faults on real processes: killed, hung, and broken workers.

A redis-server, ``sluice gateway`` and ``sluice worker`` processes (the stamped
synthetic handler: every result names the process and batch that made it, so a
job that ran twice and had both results applied would show two results).

The redis-server and the gateway are the module's (tests/kit/faults.py's
SharedGateway: the faults here are the workers'); each test flushes Redis and
starts, and ends, its own workers.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.jobs import JobStatus
from sluice.queue import QueueClient
from tests.kit.faults import (
    BROKEN,
    MODEL,
    Proc,
    SharedGateway,
    Stack,
    fault_config,
    fresh_stack,
    shared_gateway,
    submit,
    wait_gateway_sees,
)
from tests.kit.http import HTTP
from tests.kit.results import Watcher
from tests.waits import wait_until

pytestmark = [pytest.mark.system]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedGateway]:
    """The gateway reads the model's buckets and cost only: one config serves all."""
    with shared_gateway(tmp_path_factory.mktemp("gateway"), fault_config()) as gw:
        yield gw


@pytest.fixture
def stack(gateway: SharedGateway, tmp_path: Path) -> Iterator[Stack]:
    with fresh_stack(gateway, tmp_path) as s:
        yield s


def _submit_all(url: str, n: int) -> list[str]:
    ids = []
    for i in range(n):
        resp = submit(url, f"job {i} " + "w " * (i % 20))
        assert resp.status_code == 202, resp.text
        ids.append(resp.json()["id"])
    return ids


def _submit_batch(url: str, n: int) -> list[str]:
    """All at once (one round trip): a worker cannot quarantine half-way through."""
    body = {"inputs": [f"job {i} " + "w " * (i % 20) for i in range(n)]}
    resp = HTTP.post(f"{url}/v1/models/{MODEL}/jobs/batch", json=body, timeout=10)
    assert resp.status_code == 202, resp.text
    return [j["id"] for j in resp.json()["jobs"]]


def _held_by(qc: QueueClient, worker_id: str, ids: list[str]) -> list[str]:
    return [
        j
        for j in ids
        if (rec := qc.get(j)) and rec.status == JobStatus.RUNNING and rec.worker == worker_id
    ]


def _frozen_holding(qc: QueueClient, proc: Proc, ids: list[str]) -> list[str]:
    """Freeze ``proc`` once it holds jobs; the jobs it still holds while frozen, else thaw.

    Read while it is stopped, the held list cannot include a job it is about to
    complete: a batch that ended between the read and the signal is not counted.
    """
    if not _held_by(qc, "fault-a", ids):
        return []
    proc.freeze()
    held = _held_by(qc, "fault-a", ids)
    if not held:
        proc.signal(signal.SIGCONT)
    return held


def test_kill9_mid_batch_every_job_completes_and_shows_one_result(
    gateway: SharedGateway, stack: Stack
) -> None:
    s, url = stack, gateway.url
    cfg = fault_config(params={"base_ms": 150})
    path = s.write_config(cfg)
    a = s.spawn_worker(path, "--worker-id", "fault-a")
    b = s.spawn_worker(path, "--worker-id", "fault-b")
    wait_gateway_sees(url, 2)
    ids = _submit_batch(url, 48)  # a backlog: both workers are mid-batch when we look
    watcher = Watcher(url, ids).start()  # reading from before the kill to the end
    looker = s.queue(cfg)  # one client for the polling, closed at the end
    try:
        held = wait_until(
            lambda: _frozen_holding(looker, a, ids),
            20,
            "worker A frozen holding jobs",
            every_s=0.01,
        )
        a.signal(signal.SIGKILL)
        wait_until(lambda: watcher.ended() == len(ids), 40, "every job to end", every_s=0.1)
        time.sleep(2.0)  # past a lease: a wrongly requeued job would run (and show) again
    finally:
        watcher.stop()
        looker.redis.close()
    qc = s.queue(cfg)
    records = {j: qc.get(j) for j in ids}
    assert all(r is not None and r.status == JobStatus.SUCCEEDED for r in records.values())
    # The kill hit held work: every job A held when it froze ran again, on B.
    assert all(_pid_of(records[j].result) == b.pid for j in held), held  # type: ignore[union-attr,arg-type]
    assert all(records[j].attempts >= 2 for j in held), held  # type: ignore[union-attr]
    # The promise: every job id showed exactly one result, however often it was read.
    many = {j: r for j, r in watcher.seen.items() if len(r) != 1}
    assert not many, many
    assert set(watcher.seen) == set(ids) and watcher.reads > 2 * len(ids)
    stats = qc.stats(MODEL).counters
    assert stats.get("succeeded") == len(ids) and stats.get("failed", 0) == 0
    assert b.alive()


def _pid_of(result: dict[str, object]) -> int:
    return int(str(result["run"]).split("-")[0])


def test_hung_worker_loses_its_leases_and_its_late_result_is_not_applied(
    gateway: SharedGateway, stack: Stack
) -> None:
    s, url = stack, gateway.url
    # A batch takes 800 ms; the lease is 1.5 s (renewed every 0.3 s while alive).
    cfg = fault_config(params={"base_ms": 800})
    path = s.write_config(cfg)
    a = s.spawn_worker(path, "--worker-id", "fault-a", "--no-overlap")
    wait_gateway_sees(url)
    ids = _submit_all(url, 8)
    watcher = Watcher(url, ids, threads=2).start()
    looker = s.queue(cfg)
    try:
        held = wait_until(
            lambda: _held_by(looker, "fault-a", ids), 10, "worker A to hold jobs", every_s=0.01
        )
        a.signal(signal.SIGSTOP)  # hung mid-batch: no heartbeats, no renewals, no result
        b = s.spawn_worker(path, "--worker-id", "fault-b")
        qc = s.queue(cfg)
        wait_until(
            lambda: all(qc.get(j).status == JobStatus.SUCCEEDED for j in held),
            20,  # type: ignore[union-attr]
            "the hung worker's jobs to finish elsewhere",
            every_s=0.1,
        )
        first = {j: qc.get(j).result for j in held}  # type: ignore[union-attr]
        assert all(_pid_of(r) == b.pid for r in first.values())
        a.signal(signal.SIGCONT)  # its batch ends now and it sends its (late) results
        # It learns either from its next renewal (the jobs "ended while it ran":
        # succeeded elsewhere, so it stops them) or, when the batch ends first, from
        # its complete (the outcomes are counted stale).
        noticed = ("lost the lease", "stale", "ended while it ran (succeeded)")
        wait_until(
            lambda: any(m in a.text() for m in noticed),
            10,
            "the late worker to notice it lost its leases",
            every_s=0.1,
        )
        wait_until(lambda: watcher.ended() == len(ids), 20, "every job to end", every_s=0.1)
        time.sleep(1.0)  # let any late write land before we look
    finally:
        watcher.stop()
        looker.redis.close()
    assert {j: qc.get(j).result for j in held} == first  # type: ignore[union-attr]  # first result kept
    assert not {j: r for j, r in watcher.seen.items() if len(r) != 1}
    counters = qc.stats(MODEL).counters
    assert counters.get("succeeded") == len(ids)  # each job counted once
    assert counters.get("failed", 0) == 0
    # The late worker did not crash: with B drained, it takes and runs new work.
    b.signal(signal.SIGTERM)
    assert b.popen.wait(15) == 0
    more = _submit_all(url, 2)
    wait_until(
        lambda: all(qc.get(j).status == JobStatus.SUCCEEDED for j in more),
        15,  # type: ignore[union-attr]
        "the late worker to run new jobs",
        every_s=0.1,
    )
    assert all(_pid_of(qc.get(j).result) == a.pid for j in more)  # type: ignore[union-attr]
    assert a.alive() and "Traceback" not in a.text()


def test_broken_model_quarantines_and_the_queue_is_not_drained_into_errors(
    gateway: SharedGateway, stack: Stack
) -> None:
    s, url = stack, gateway.url
    good_cfg = fault_config(params={"base_ms": 20})
    bad_cfg = fault_config(BROKEN, worker={"quarantine_after_failures": 2})
    good, bad = s.write_config(good_cfg), s.write_config(bad_cfg)
    x = s.spawn_worker(bad, "--worker-id", "fault-broken")
    wait_gateway_sees(url)
    ids = _submit_batch(url, 40)
    # Alone, it would fail all 40 within a second if it did not stop itself.
    assert x.popen.wait(15) == 4, x.text()  # EXIT_QUARANTINED
    qc = s.queue(good_cfg)
    touched = [j for j in ids if qc.get(j).attempts > 0]  # type: ignore[union-attr]
    assert 0 < len(touched) <= 2 * 4  # two failed batches of at most max_batch (4)
    s.spawn_worker(good, "--worker-id", "fault-healthy")
    wait_until(
        lambda: qc.stats(MODEL).counters.get("succeeded", 0) == len(ids),
        30,
        "the healthy worker to run every job",
        every_s=0.1,
    )
    counters = qc.stats(MODEL).counters
    assert counters.get("failed", 0) == 0 and qc.dead_letters(MODEL) == []
    assert all(qc.get(j).attempts >= 2 for j in touched)  # type: ignore[union-attr]
    assert "quarantined" in x.text()


def test_broken_worker_beside_a_healthy_one_costs_no_job_with_default_settings(
    gateway: SharedGateway, stack: Stack
) -> None:
    # Defaults: quarantine after 5 failed batches, 3 attempts a job, a 30 s lease and a
    # 10 s heartbeat TTL. A job's last attempt never goes to the worker that failed its
    # previous one while another serving worker of its bucket is live (ADR 0166): the
    # claim script leaves it to the healthy worker, whichever worker claims first. So
    # nothing hangs on timing: not the broken worker's wait (ADR 0066), not which one
    # a wake token reaches, not how loaded the machine is. (The lease bounds how long a
    # left job waits for the other worker to claim: here a 20 ms batch's time.)
    s, url = stack, gateway.url
    defaults = {"batching": {"lease_s": 30.0}, "worker": {"heartbeat_ttl_s": 10.0}}
    good_cfg = fault_config(params={"base_ms": 20}, **defaults)
    bad_cfg = fault_config(BROKEN, **defaults)
    good, bad = s.write_config(good_cfg), s.write_config(bad_cfg)
    s.spawn_worker(good, "--worker-id", "fault-healthy")
    x = s.spawn_worker(bad, "--worker-id", "fault-broken")
    wait_gateway_sees(url, 2)
    ids: list[str] = []
    deadline = time.monotonic() + 25
    while x.alive() and time.monotonic() < deadline:  # traffic until it quarantines
        ids += _submit_batch(url, 16)
        time.sleep(0.2)
    assert x.popen.wait(5) == 4, x.text()
    qc = s.queue(good_cfg)

    def ended() -> int:
        c = qc.stats(MODEL).counters
        return int(c.get("succeeded", 0)) + int(c.get("failed", 0))

    wait_until(lambda: ended() == len(ids), 30, "every job to end", every_s=0.1)
    assert qc.stats(MODEL).counters.get("failed", 0) == 0 and qc.dead_letters(MODEL) == []
    assert qc.stats(MODEL).counters.get("retried", 0) >= 5  # it did fail batches first
    records = [qc.get(j) for j in ids]
    assert all(r is not None and r.status == JobStatus.SUCCEEDED for r in records)
