"""Several processes claiming the same queues at once; a worker that dies.

The children's functions live in tests/kit/claimers.py: a spawned child imports
the module its function is in, and this one pulls in tests/conftest.py."""

from __future__ import annotations

import multiprocessing as mp
import time
from collections import Counter

import pytest

from sluice.jobs import NewJob, Outcome
from sluice.queue import QueueClient
from tests.kit.claimers import claim_then_hang, drain

pytestmark = [pytest.mark.redis, pytest.mark.system]

JOBS = 3000


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
        ctx.Process(target=drain, args=(redis_url, f"w{i}", 30.0, out, start)) for i in range(4)
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


def test_killed_worker_jobs_run_elsewhere_none_lost(redis_url: str, queue_factory) -> None:
    q: QueueClient = queue_factory(batching={"lease_s": 0.3, "max_batch": 8})
    ids = [s.id for s in q.submit("m", [NewJob(input=i, bucket="32", cost=1) for i in range(20)])]
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=claim_then_hang, args=(redis_url, ready))
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
