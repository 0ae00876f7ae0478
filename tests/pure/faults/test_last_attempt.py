"""ADR 0166 as a property, the claim script on fakeredis: whatever order workers
claim, fail, park and come back in, a job's last attempt goes to the worker that
failed its previous one only when no other serving worker of its bucket is live;
and a job is never stranded: a lone worker left at the end drains every queue."""

from __future__ import annotations

import time

import fakeredis
from hypothesis import given
from hypothesis import strategies as st

from sluice import registry
from sluice.jobs import JobStatus, NewJob, Outcome
from sluice.queue import QueueClient
from tests.conftest import budget, make_config
from tests.factories import worker_info

MAX_ATTEMPTS = 3
# a serves bucket 32, b both, c only 128: c never counts as another worker for 32.
SERVES = {"a": ["32"], "b": ["32", "128"], "c": ["128"]}
# Mostly failures, on few jobs: workers meet their own failures' last attempts often.
WHAT = ["fail", "fail", "fail", "ok", "park", "serve"]
STEP = st.tuples(st.sampled_from(sorted(SERVES)), st.sampled_from(WHAT))


def heartbeat(r: fakeredis.FakeRedis, wid: str, parked: bool) -> None:
    info = worker_info(id=wid, buckets=SERVES[wid], parked=parked, started_at=time.time())
    for cmd in registry.heartbeat(info, 30):
        r.execute_command(*cmd)


def stack() -> tuple[fakeredis.FakeRedis, QueueClient, dict[str, str]]:
    r = fakeredis.FakeRedis(decode_responses=True)
    cfg = make_config(retry={"backoff_ms": 0}, batching={"max_attempts": MAX_ATTEMPTS})
    q = QueueClient(r, dict(cfg.models))
    for wid in SERVES:
        heartbeat(r, wid, parked=False)
    bucket_of = {}
    for bucket, n in (("32", 2), ("128", 1)):
        for sub in q.submit("m", [NewJob(input="x", bucket=bucket, cost=4)] * n):
            bucket_of[sub.id] = bucket
    return r, q, bucket_of


# Each example runs up to 40 claim and complete scripts in fakeredis's Lua.
@budget(0.1, deadline=None)
@given(steps=st.lists(STEP, max_size=40))
def test_the_last_attempt_avoids_its_failed_worker_and_nothing_is_stranded(
    steps: list[tuple[str, str]],
) -> None:
    r, q, bucket_of = stack()
    serving = set(SERVES)
    failed_by: dict[str, str] = {}  # job -> the worker its latest attempt failed on
    for wid, what in steps:
        if what in ("park", "serve"):
            heartbeat(r, wid, parked=what == "park")
            serving = serving - {wid} if what == "park" else serving | {wid}
            continue
        batch = q.claim("m", wid, max_batch=2)
        for job in batch.jobs:
            b = bucket_of[job.id]
            others = [w for w in serving - {wid} if b in SERVES[w]]
            if job.attempts == MAX_ATTEMPTS and failed_by.get(job.id) == wid:
                assert others == [], (job.id, wid, others)
        if what == "fail":
            failed_by |= {j.id: wid for j in batch.jobs}
            q.complete("m", [Outcome.retry(j.id, "worker_error", "x") for j in batch.jobs], wid)
        else:
            q.complete("m", [Outcome.ok(j.id, {"ok": 1}) for j in batch.jobs], wid)
    # Every worker but b parks: b alone takes what is left, its own failures included.
    for wid in ("a", "c"):
        heartbeat(r, wid, parked=True)
    for _ in range(len(bucket_of)):
        batch = q.claim("m", "b", max_batch=len(bucket_of))
        q.complete("m", [Outcome.ok(j.id, {"ok": 1}) for j in batch.jobs], "b")
    ended = {q.get(j).status for j in bucket_of}
    assert ended <= {JobStatus.SUCCEEDED, JobStatus.FAILED}, ended
    assert q.stats("m").queued == 0 and q.stats("m").in_flight == 0
