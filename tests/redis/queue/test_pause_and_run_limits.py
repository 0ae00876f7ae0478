"""Pause and resume, and the limits of a running job (ADR 0154), in the scripts
themselves: claim.lua leases nothing while paused, submit.lua refuses only when
told, renew.lua ends a held job past its deadline or max_run_ms and says why,
complete.lua refuses such a job's result."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from sluice import keys
from sluice.errors import ModelPaused
from sluice.jobs import JobStatus, NewJob, Outcome
from sluice.queue.pause import pause_call, resume_call, state_call
from tests.waits import redis_now_ms, wait_until

pytestmark = pytest.mark.redis


def small(i: int, **kw: Any) -> NewJob:
    return NewJob(input=f"text {i}", bucket="32", cost=4, **kw)


def test_a_paused_model_queues_but_leases_nothing_until_resumed(
    r: redis.Redis, queue_factory: Any
) -> None:
    q = queue_factory()
    assert q.run(pause_call("m", by="ops", refuse_submits=False, now_ms=5)) is True
    assert q.run(pause_call("m", by="ops", refuse_submits=False, now_ms=6)) is False  # already
    state = q.run(state_call("m"))
    assert state.paused and state.by == "ops" and state.at_ms == 6 and not state.refuse_submits
    job = q.submit("m", [small(0)])[0].id  # accepted: it waits in its queue
    assert r.llen(keys.wake_key("m", "32")) == 1
    assert len(q.claim("m", "w1")) == 0
    assert r.llen(keys.wake_key("m", "32")) == 0  # an idle worker blocks, not spins
    assert q.get(job).status is JobStatus.QUEUED
    assert q.run(resume_call("m", ["32", "128", "512"])) is True
    assert r.llen(keys.wake_key("m", "32")) > 0  # the blocked workers wake at once
    assert [j.id for j in q.claim("m", "w1").jobs] == [job]
    assert q.run(resume_call("m", ["32"])) is False and not q.run(state_call("m")).paused


def test_a_pause_that_refuses_submits_refuses_new_jobs_only(queue_factory: Any) -> None:
    q = queue_factory()
    kept = q.submit("m", [small(0, idempotency_key="k")])[0].id
    q.run(pause_call("m", by="", refuse_submits=True, now_ms=1))
    with pytest.raises(ModelPaused):
        q.submit("m", [small(1)])
    # A replay of a job that exists still answers: nothing new is asked for.
    replay = q.submit("m", [small(0, idempotency_key="k")])[0]
    assert replay.id == kept and not replay.created
    q.run(resume_call("m", ["32"]))
    assert q.submit("m", [small(2)])[0].created


def _running(q: Any, worker: str = "w1", **job: Any) -> str:
    job_id = q.submit("m", [small(0, **job)])[0].id
    assert [j.id for j in q.claim("m", worker).jobs] == [job_id]
    return job_id


def test_renewal_ends_a_job_past_its_deadline_and_says_why(
    r: redis.Redis, queue_factory: Any
) -> None:
    q = queue_factory()
    job_id = _running(q, deadline_ms=300)
    other = _running(q)
    q.cancel(other)  # cancelled while it ran: the renewal says so too
    dl = int(r.hget(keys.job_key("m", job_id), "dl"))
    wait_until(lambda: redis_now_ms(r) > dl, what="the deadline to pass")
    assert q.renew_why("m", "w1", [job_id, other]) == {job_id: "expired", other: "cancelled"}
    rec = q.get(job_id)
    assert rec.status is JobStatus.EXPIRED and rec.result is None
    assert r.zscore(keys.inflight_key("m"), job_id) is None
    # The worker's late result is refused (the job ended first).
    assert q.complete("m", [Outcome.ok(job_id, {"late": 1})], "w1") == (0, 1)
    assert q.get(job_id).status is JobStatus.EXPIRED


def test_a_job_over_max_run_ms_fails_for_good_and_its_result_is_refused(
    r: redis.Redis, queue_factory: Any
) -> None:
    q = queue_factory(limits={"max_run_ms": 200}, batching={"max_attempts": 3})
    renewed, refused = _running(q), _running(q)
    start = int(r.hget(keys.job_key("m", refused), "start"))  # the later claim
    wait_until(lambda: redis_now_ms(r) > start + 200, what="max_run_ms to pass")
    assert q.renew_why("m", "w1", [renewed]) == {renewed: "run_time_exceeded"}
    # A result that reaches complete before any renewal saw the overrun: refused too.
    assert q.complete("m", [Outcome.ok(refused, {"v": 1})], "w1") == (1, 0)
    for job_id in (renewed, refused):
        rec = q.get(job_id)
        assert rec.status is JobStatus.FAILED and rec.result is None, job_id
        assert rec.error["type"] == "run_time_exceeded" and rec.attempts == 1  # not retried
    assert set(q.dead_letters("m")) == {renewed, refused}


def test_a_job_within_its_limits_is_renewed_and_completes(queue_factory: Any) -> None:
    q = queue_factory(limits={"max_run_ms": 60_000})
    job_id = _running(q, deadline_ms=60_000)
    assert q.renew_why("m", "w1", [job_id]) == {}
    assert q.complete("m", [Outcome.ok(job_id, {"v": 1})], "w1") == (1, 0)
    assert q.get(job_id).status is JobStatus.SUCCEEDED
