"""Redis faults on real processes: killed and restarted from its AOF, paused (slow),
and unreachable; the gateway answers 503 fast, and everything recovers by itself.

The module's tests share one redis-server (killed, paused and restarted on the
same port and data directory) and one ``sluice gateway`` (tests/kit/faults.py's
SharedGateway: a gateway costs about 2 CPU s to start, and living through an
earlier test's outage is no excuse for failing this one's); each test flushes
Redis, sets its append-only file, starts its own ``sluice worker`` through the
CLI, and reads the gateway's log from its own start. The worker started while
Redis is down has a redis-server of its own and no gateway.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from sluice.errors import JobNotFound
from sluice.jobs import JobStatus, NewJob
from sluice.queue import QueueClient
from tests.kit.faults import (
    MODEL,
    LogSince,
    Proc,
    SharedGateway,
    Stack,
    fault_config,
    ready,
    shared_gateway,
    submit,
    wait_gateway_sees,
)
from tests.kit.http import HTTP
from tests.waits import HUNG_S, wait_until

pytestmark = [pytest.mark.system]
REDIS_TIMEOUT_S = 1.0  # gateway.redis_timeout_s in these tests (fault_config)
# Answered within this during an outage: ten times the Redis timeout, so a loaded
# machine passes; a gateway that does not bound its Redis calls never answers while
# Redis is paused (the client gives up at OUTAGE_CLIENT_TIMEOUT_S).
OUTAGE_ANSWER_S = 10 * REDIS_TIMEOUT_S
OUTAGE_CLIENT_TIMEOUT_S = 30.0
LONG_POLL_S = 60  # gateway.max_wait_s: a long-poll answered well before it was woken


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedGateway]:
    """Redis starts with its append-only file: the first tests want one."""
    tmp = tmp_path_factory.mktemp("gateway")
    with shared_gateway(tmp, fault_config(), aof="always") as gw:
        yield gw


@pytest.fixture
def on_shared(gateway: SharedGateway, tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """``on_shared(aof) -> Stack`` on the shared Redis (SharedGateway.fresh)."""
    made: list[Stack] = []

    def make(aof: str | None) -> Stack:
        made.append(gateway.fresh(tmp_path / f"stack{len(made)}", aof))
        return made[-1]

    yield make
    for s in made:
        s.teardown()


@dataclass
class Submitter:
    """A client submitting steadily from a thread, recording every answer with its time."""

    url: str
    every_s: float = 0.01
    accepted: list[tuple[float, str]] = field(default_factory=list)  # (monotonic, id)
    refused: list[tuple[float, int]] = field(default_factory=list)  # (monotonic, status)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Submitter:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        with httpx.Client(timeout=5) as c:
            i = 0
            while not self._stop.is_set():
                i += 1
                try:
                    resp = c.post(
                        f"{self.url}/v1/models/{MODEL}/jobs",
                        json={"input": f"job {i} " + "w " * (i % 30)},
                    )
                except httpx.HTTPError:
                    self.refused.append((time.monotonic(), 0))
                    continue
                if resp.status_code == 202:
                    self.accepted.append((time.monotonic(), resp.json()["id"]))
                else:
                    self.refused.append((time.monotonic(), resp.status_code))
                time.sleep(self.every_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


def _exists(qc: QueueClient, job_id: str) -> bool:
    try:
        return qc.get(job_id) is not None
    except JobNotFound:
        return False


def _outage_lines(p: Proc | LogSince) -> int:
    """Lines saying an outage began (sluice.backoff's wording), reminders included."""
    return p.count("retrying with backoff") + p.count("Redis still unavailable")


def _assert_survived(gw: LogSince, workers: list[Proc], *, workers_saw_it: bool = True) -> None:
    """Alive, and logged the outage a bounded number of times (not once per attempt).

    A worker blocked on a paused Redis may never see an error: its calls wait out
    the socket timeout (5 s, one retry), longer than these outages.
    """
    assert gw.alive(), gw.text()
    # completions + snapshots, each once per outage, then each once back
    assert 1 <= _outage_lines(gw) <= 2, gw.text()
    assert gw.count("Redis answers again") == _outage_lines(gw), gw.text()
    for w in workers:
        assert w.alive(), w.text()
        # the batch loop + housekeeping, each once per outage, then each once back;
        # a batch whose outcomes could not be sent says so once
        assert _outage_lines(w) <= 2 and w.count("could not send") <= 1, w.text()
        assert w.count("Redis answers again") == _outage_lines(w), w.text()
        if workers_saw_it:
            assert _outage_lines(w) + w.count("could not send") >= 1, w.text()
        assert "Traceback" not in w.text()


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_redis_killed_and_restarted_from_its_aof(
    gateway: SharedGateway, on_shared: Callable[..., Stack], fsync: str
) -> None:
    s = on_shared(fsync)
    cfg = fault_config(params={"base_ms": 20}, batching={"max_batch": 8})
    path = s.write_config(cfg)
    gw, url = gateway.log_from_now(), gateway.url
    w = s.spawn_worker(path)
    wait_gateway_sees(url)
    load = Submitter(url).start()
    try:
        wait_until(lambda: len(load.accepted) >= 100, 20, "100 accepted jobs", every_s=0.1)
        time.sleep(max(0.0, 3.0 - (time.monotonic() - load.accepted[0][0])))  # 3 s of load
        s.redis.kill9()  # mid-load: submits, claims and completes in flight
        killed_at = time.monotonic()
        time.sleep(1.5)
        s.redis.start()  # same port, same data dir: it replays the AOF
        wait_until(lambda: ready(url), 15, "the gateway to be ready again", every_s=0.1)
        wait_until(
            lambda: any(t > killed_at + 1.5 for t, _ in load.accepted),
            15,
            "a submit accepted after the restart",
            every_s=0.1,
        )
    finally:
        load.stop()
    qc = s.queue(cfg)
    accepted = [j for _, j in load.accepted]
    lost = [j for j in accepted if not _exists(qc, j)]
    before = [j for t, j in load.accepted if t <= killed_at]
    print(
        f"appendfsync {fsync}: {len(accepted)} accepted ({len(before)} before the kill), "
        f"{len(lost)} lost"
    )
    if fsync == "always":
        assert lost == []  # the promise: a 202 means it is on disk
    else:
        # everysec may lose about the last second of acknowledged writes on an OS crash;
        # a killed process loses nothing already written to the kernel (see faults.md).
        recent = [j for t, j in load.accepted if killed_at - 2.0 <= t <= killed_at]
        assert set(lost) <= set(recent)
    kept = [j for j in accepted if j not in lost]
    wait_until(
        lambda: qc.stats(MODEL).counters.get("succeeded", 0) >= len(kept),
        40,
        "every accepted job to complete",
        every_s=0.1,
    )
    assert all(qc.get(j).status == JobStatus.SUCCEEDED for j in kept)  # type: ignore[union-attr]
    assert qc.stats(MODEL).counters.get("failed", 0) == 0
    _assert_survived(gw, [w])


@pytest.mark.parametrize("fault", ["paused", "killed"])
def test_redis_slow_or_unreachable_gives_fast_503_and_recovers_without_restart(
    gateway: SharedGateway, on_shared: Callable[..., Stack], fault: str
) -> None:
    s = on_shared(None)  # killed: it comes back empty
    # One job of 200 words runs about 1 s: long enough that a long-poll must be woken.
    cfg = fault_config(params={"base_ms": 10, "per_token_ms": 5})
    path = s.write_config(cfg)
    gw, url = gateway.log_from_now(), gateway.url
    w = s.spawn_worker(path)
    wait_gateway_sees(url)
    assert submit(url, "before").status_code == 202
    if fault == "paused":
        s.redis.pause()  # a Redis that accepts connections and never answers
    else:
        s.redis.kill9()  # nothing listening: connections refused
    try:
        for _ in range(3):  # each answered within the bound, measured by the client
            t0 = time.monotonic()
            resp = submit(url, "during the outage", timeout_s=OUTAGE_CLIENT_TIMEOUT_S)
            took = time.monotonic() - t0
            assert resp.status_code == 503 and took < OUTAGE_ANSWER_S, (resp.text, took)
            assert resp.json()["error"]["type"] == "redis_unavailable"
            t0 = time.monotonic()
            assert HTTP.get(f"{url}/readyz", timeout=OUTAGE_CLIENT_TIMEOUT_S).status_code == 503
            assert time.monotonic() - t0 < OUTAGE_ANSWER_S
            time.sleep(1.0)  # pacing: the tries spread over a few seconds of outage
    finally:
        if fault == "paused":
            s.redis.resume()
        else:
            s.redis.start()  # same port, empty: workers re-register by their heartbeats
    wait_until(lambda: ready(url), 15, "readiness to come back", every_s=0.1)
    wait_gateway_sees(url, timeout_s=15)
    resp = submit(url, " ".join(["word"] * 200))
    assert resp.status_code == 202, resp.text
    t0 = time.monotonic()
    job = HTTP.get(
        f"{url}/v1/jobs/{resp.json()['id']}", params={"wait": LONG_POLL_S}, timeout=LONG_POLL_S + 30
    ).json()
    # Woken by the (resubscribed) completion channel, not by the 60 s wait running out.
    assert job["status"] == "succeeded" and time.monotonic() - t0 < LONG_POLL_S / 2, job
    _assert_survived(gw, [w], workers_saw_it=fault == "killed")


def test_a_worker_started_while_redis_is_down_waits_for_it(
    stack_factory: Callable[..., Stack],
) -> None:
    s = stack_factory()
    cfg = fault_config()
    path = s.write_config(cfg)
    s.redis.kill9()
    w = s.spawn_worker(path, wait_ready=False)
    # Its first try (a loaded machine may take seconds to start it), then a window
    # of further tries: it must neither exit nor log each one.
    wait_until(
        lambda: w.count("retrying with backoff") >= 1 or not w.alive(),
        HUNG_S,
        "the worker's first try",
        every_s=0.1,
    )
    time.sleep(2.5)
    assert w.alive(), w.text()
    assert w.count("retrying with backoff") == 1
    s.redis.start()
    wait_until(
        lambda: " ready: " in w.text(), 15, "the worker to start once Redis is back", every_s=0.1
    )
    qc = s.queue(cfg)
    [job] = qc.submit(MODEL, [NewJob("hello", "32", 1)])
    wait_until(
        lambda: qc.get(job.id).status == JobStatus.SUCCEEDED, 10, "the job to run", every_s=0.1
    )  # type: ignore[union-attr]
    assert w.count("Redis answers again") == 1
