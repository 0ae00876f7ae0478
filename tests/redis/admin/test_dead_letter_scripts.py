"""Dead letters, redrive, purge and retry backoff on a real Redis (docs/adr/0153):
the scripts of sluice/admin and the backoff in the queue scripts."""

from __future__ import annotations

import time

import pytest

from sluice import keys
from sluice.admin import ops
from sluice.jobs import NewJob, Outcome
from sluice.queue import QueueClient
from tests.waits import redis_now_ms, wait_until

pytestmark = pytest.mark.redis
NO_RETRY = {"batching": {"max_attempts": 1}, "retry": {"backoff_ms": 0}}


def client(queue_factory, **overrides: object) -> QueueClient:  # type: ignore[no-untyped-def]
    q: QueueClient = queue_factory(**(overrides or NO_RETRY))
    q.register(ops.scripts())
    return q


def job(tag: str = "x", bucket: str = "32", priority: str = "normal", **kw: object) -> NewJob:
    return NewJob(input=tag, bucket=bucket, cost=1, priority=priority, **kw)  # type: ignore[arg-type]


def fail_all(q: QueueClient, worker: str = "w1") -> list[str]:
    failed: list[str] = []
    while batch := q.claim("m", worker).jobs:
        q.complete("m", [Outcome.fail(j.id, "boom", f"bad {j.id}") for j in batch], worker)
        failed += [j.id for j in batch]
    return failed


def test_a_failed_attempt_waits_out_its_backoff_then_keeps_its_place(queue_factory) -> None:
    q = client(queue_factory, batching={"max_attempts": 3}, retry={"backoff_ms": 300})
    first, second = (s.id for s in q.submit("m", [job("a"), job("b")]))
    (taken,) = q.claim("m", "w1", max_batch=1).jobs
    q.complete("m", [Outcome.retry(first, "oops", "again")], "w1")
    rec = q.get(first)
    assert rec.status == "queued" and rec.attempts == 1
    # Not at the queue head: the next claim gets the other job, then nothing.
    assert [j.id for j in q.claim("m", "w2", max_batch=5).jobs] == [second]
    assert q.claim("m", "w2").jobs == []
    again = wait_until(lambda: q.claim("m", "w3").jobs, what="the retry becomes claimable")
    assert [j.id for j in again] == [first] and again[0].attempts == 2
    assert taken.id == first


def test_reclaim_promotes_a_due_retry_and_cancel_takes_a_waiting_one(queue_factory, r) -> None:
    q = client(queue_factory, batching={"max_attempts": 3, "lease_s": 0.05},
               retry={"backoff_ms": 50, "backoff_max_ms": 50})  # fmt: skip
    a, b = (s.id for s in q.submit("m", [job("a"), job("b")]))
    assert len(q.claim("m", "w1").jobs) == 2
    time.sleep(0.06)  # both leases lapse
    assert q.reclaim("m") == 2  # the autoscaler's reclaim: both wait out a backoff
    assert r.zcard(keys.retry_key("m")) == 2 and r.zcard(keys.queue_key("m", "32")) == 0
    q.cancel(b)
    assert r.zscore(keys.retry_key("m"), b) is None
    wait_until(lambda: q.reclaim("m") == 0 and r.zcard(keys.queue_key("m", "32")) == 1)
    assert r.zrange(keys.queue_key("m", "32"), 0, -1) == [a]
    assert q.stats("m").buckets[0].queued_cost == 1  # the cancelled one's cost is gone


def test_list_page_and_read_one_say_why_each_failed(queue_factory) -> None:
    q = client(queue_factory)
    q.submit("m", [job(str(i)) for i in range(5)])
    failed = fail_all(q, "w-7")
    first = ops.drive(ops.page("m", limit=2), q.run)
    assert first.total == 5 and [d.id for d in first.items] == failed[::-1][:2]
    d = first.items[0]
    assert d.error == {"type": "boom", "message": f"bad {d.id}"}
    assert (d.attempts, d.last_worker, d.bucket) == (1, "w-7", "32")
    assert d.enqueued_at_ms <= (d.started_at_ms or 0) <= (d.failed_at_ms or 0)
    # A failure between two pages pushes the list down: the next page goes on after
    # the last id shown, not at a stale offset.
    q.submit("m", [job("late")])
    fail_all(q)
    rest = ops.drive(ops.page("m", limit=10, cursor=first.next_cursor), q.run)
    assert [x.id for x in rest.items] == failed[::-1][2:] and rest.next_cursor is None
    assert ops.drive(ops.one(failed[0], "m"), q.run).id == failed[0]


def test_redrive_keeps_the_id_resets_attempts_and_the_job_can_succeed(queue_factory, r) -> None:
    q = client(queue_factory)
    # a's deadline passes while it is a dead letter: a redrive means "run it" all the same
    ids = [s.id for s in q.submit("m", [job("a", deadline_ms=300), job("b", bucket="128")])]
    ids += [q.submit("m", [job("c")])[0].id]
    fail_all(q)
    deadline = int(r.hget(keys.job_key("m", ids[0]), "dl"))
    wait_until(lambda: redis_now_ms(r) > deadline, what="a's deadline to pass")
    where = ops.DeadLetterFilter(bucket="32")
    chosen = ops.drive(ops.select("m", where), q.run)
    assert set(chosen) == {ids[0], ids[2]}
    assert ops.drive(ops.act("m", "redrive", chosen), q.run) == chosen
    assert r.lrange(keys.dead_letter_key("m"), 0, -1) == [ids[1]]
    assert r.ttl(keys.job_key("m", ids[0])) == -1  # unfinished again: no TTL
    batch = q.claim("m", "w2").jobs
    assert {j.id for j in batch} == {ids[0], ids[2]} and {j.attempts for j in batch} == {1}
    q.complete("m", [Outcome.ok(j.id, [1]) for j in batch], "w2")
    assert q.get(ids[0]).status == "succeeded" and q.get(ids[0]).error is None
    assert q.stats("m").counters["redriven"] == 2
    # A second redrive of the same ids finds no dead letters: nothing happens twice.
    assert ops.drive(ops.act("m", "redrive", chosen), q.run) == []


def test_large_actions_go_in_chunks(queue_factory, r, monkeypatch) -> None:
    monkeypatch.setattr(ops, "CHUNK", 3)
    q = client(queue_factory)
    q.submit("m", [job(str(i)) for i in range(8)])
    fail_all(q)
    calls: list[str] = []

    def run(call):  # type: ignore[no-untyped-def]
        calls.append(call.script)
        return q.run(call)

    all_ids = ops.drive(ops.select("m", None), run)
    assert len(ops.drive(ops.act("m", "purge", all_ids), run)) == 8
    assert calls.count("admin_dead_letters") == 3  # 3 + 3 + 2
    assert r.llen(keys.dead_letter_key("m")) == 0
    assert not any(r.exists(keys.job_key("m", i)) for i in all_ids)


def test_retry_one_job_refuses_what_is_not_failed(queue_factory) -> None:
    q = client(queue_factory)
    (failed,) = (s.id for s in q.submit("m", [job()]))
    (queued,) = (s.id for s in q.submit("m", [job()]))
    q.claim("m", "w", max_batch=1)
    q.complete("m", [Outcome.fail(failed, "e", "x")], "w")
    with pytest.raises(Exception, match="queued") as e:
        ops.drive(ops.retry(queued, q.ops.models), q.run)
    assert getattr(e.value, "status", None) == "queued"  # JobConflict: 409
    with pytest.raises(Exception, match="not found"):
        ops.drive(ops.retry("m.nothing", q.ops.models), q.run)
    assert ops.drive(ops.retry(failed, q.ops.models), q.run) == "m"
    assert q.get(failed).status == "queued"


def test_purge_cancels_one_class_of_one_bucket_and_keeps_later_submits(queue_factory, r) -> None:
    q = client(
        queue_factory,
        batching={"max_attempts": 2},
        retry={"backoff_ms": 60_000, "backoff_max_ms": 60_000},
    )
    low = [s.id for s in q.submit("m", [job(str(i), priority="low") for i in range(4)])]
    high = q.submit("m", [job("h", priority="high")])[0].id
    other = q.submit("m", [job("o", bucket="128", priority="low")])[0].id
    (running,) = q.claim("m", "w", max_batch=1).jobs  # the high one
    q.complete("m", [Outcome.retry(running.id, "e", "x")], "w")  # waits out its backoff
    sub = r.pubsub()
    sub.subscribe(keys.done_channel("m"))
    n = ops.drive(ops.purge_queue("m", q.ops.model("m"), priority="low", bucket="32"), q.run)
    assert n == 4
    assert {q.get(i).status for i in low} == {"cancelled"}
    assert q.get(other).status == "queued" and q.get(high).status == "queued"
    msgs = [m for _ in range(5) if (m := sub.get_message(timeout=1)) and m["type"] == "message"]
    assert set(msgs[-1]["data"].split(",")) == set(low)  # every waiter hears they ended
    # All: the job waiting out its backoff too; the bucket's cost counters are back to 0.
    assert ops.drive(ops.purge_queue("m", q.ops.model("m")), q.run) == 2
    assert r.zcard(keys.retry_key("m")) == 0
    assert all(b.queued_cost == 0 for b in q.stats("m").buckets)
    assert q.stats("m").counters["cancelled"] == 6


def test_a_purge_keeps_what_was_submitted_after_it_began(queue_factory) -> None:
    q = client(queue_factory)
    before = q.submit("m", [job("a")])[0].id
    plan = ops.purge_queue("m", q.ops.model("m"), bucket="32")
    reply = q.run(next(plan))  # the purge reads where the sequence stands ...
    after = q.submit("m", [job("b")])[0].id  # ... then a submit lands
    with pytest.raises(StopIteration) as done:
        call = plan.send(reply)
        while True:
            call = plan.send(q.run(call))
    assert done.value.value == 1
    assert q.get(before).status == "cancelled" and q.get(after).status == "queued"


def test_a_late_result_after_a_redrive_or_a_purge_is_kept_once(queue_factory) -> None:
    q = client(queue_factory, batching={"max_attempts": 1, "lease_s": 0.05},
               retry={"backoff_ms": 0})  # fmt: skip
    a, b = (s.id for s in q.submit("m", [job("a"), job("b")]))
    q.claim("m", "slow")
    time.sleep(0.06)
    q.reclaim("m")  # the slow worker's leases lapse: both dead-lettered
    ops.drive(ops.act("m", "redrive", [a, b]), q.run)
    # The slow worker's result for a arrives after the redrive: kept, and the job
    # leaves its queue, so no worker runs it twice.
    assert q.complete("m", [Outcome.ok(a, [1])], "slow") == (1, 0)
    assert q.get(a).status == "succeeded"
    # b is purged, then its late result arrives: stale, b stays cancelled.
    assert ops.drive(ops.purge_queue("m", q.ops.model("m")), q.run) == 1
    assert q.complete("m", [Outcome.ok(b, [1])], "slow") == (0, 1)
    assert q.get(b).status == "cancelled"
    assert q.claim("m", "w").jobs == []
