"""Several processes claiming the same queues at once; a worker that dies."""

from __future__ import annotations

import multiprocessing as mp
import time
from collections import Counter
from typing import Any

import pytest

from sluice.jobs import NewJob, Outcome
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.conftest import make_config

pytestmark = [pytest.mark.redis, pytest.mark.system]

JOBS = 3000


def _drain(url: str, worker: str, lease_s: float, out: mp.Queue, start: Any) -> None:  # type: ignore[type-arg]
    cfg = make_config(batching={"lease_s": lease_s, "max_batch": 16})
    q = QueueClient(connect(url), dict(cfg.models))
    q.redis.ping()
    start.wait(60)  # every process connected: they race for the same jobs from here
    seen: list[str] = []
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 0.5:
        batch = q.claim("m", worker)
        if not batch.jobs:
            time.sleep(0.005)
            continue
        idle_since = time.monotonic()
        seen += [j.id for j in batch.jobs]
        q.complete("m", [Outcome.ok(j.id, worker) for j in batch.jobs])
    out.put(seen)


def test_concurrent_claimers_get_every_job_exactly_once(redis_url: str, queue_factory) -> None:
    q: QueueClient = queue_factory(batching={"max_batch": 16})
    buckets = ["32", "128", "512"]
    jobs = [NewJob(input=i, bucket=buckets[i % 3], cost=1 + i % 30) for i in range(JOBS)]
    submitted = []
    for start in range(0, JOBS, 500):
        submitted += [s.id for s in q.submit("m", jobs[start : start + 500])]
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    start = ctx.Barrier(4)
    procs = [
        ctx.Process(target=_drain, args=(redis_url, f"w{i}", 30.0, out, start)) for i in range(4)
    ]
    for p in procs:
        p.start()
    claimed = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(10)
    every = [job_id for seen in claimed for job_id in seen]
    counts = Counter(every)
    assert not [i for i, c in counts.items() if c > 1], "a job was delivered twice"
    assert set(every) == set(submitted)
    assert sum(1 for seen in claimed if seen) >= 2  # the work really was shared
    stats = q.stats("m")
    assert stats.counters["succeeded"] == JOBS and stats.queued == 0 and stats.in_flight == 0


def _claim_then_hang(url: str, ready: mp.Event) -> None:  # type: ignore[type-arg]
    cfg = make_config(batching={"lease_s": 0.3, "max_batch": 8})
    q = QueueClient(connect(url), dict(cfg.models))
    q.claim("m", "doomed")
    ready.set()
    time.sleep(60)  # killed before it completes anything


def test_killed_worker_jobs_run_elsewhere_none_lost(redis_url: str, queue_factory) -> None:
    q: QueueClient = queue_factory(batching={"lease_s": 0.3, "max_batch": 8})
    ids = [s.id for s in q.submit("m", [NewJob(input=i, bucket="32", cost=1) for i in range(20)])]
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_claim_then_hang, args=(redis_url, ready))
    proc.start()
    assert ready.wait(30)
    proc.kill()
    proc.join(10)
    assert q.stats("m").in_flight == 8
    done: set[str] = set()
    deadline = time.monotonic() + 10
    while len(done) < len(ids) and time.monotonic() < deadline:
        batch = q.claim("m", "survivor")
        q.complete("m", [Outcome.ok(j.id, "ok") for j in batch.jobs])
        done |= {j.id for j in batch.jobs}
        if not batch.jobs:
            time.sleep(0.05)
    assert done == set(ids)
    assert all(q.get(i).result == "ok" for i in ids)
