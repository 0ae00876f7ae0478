"""The generative step's round trip against a real Redis (ADR 0146): stream
entries and their layout, leases, lost jobs, restarts, learned output length."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from sluice import keys
from sluice.generate.admission import expected_output, new_job
from sluice.generate.ops import Append, Finished, run_step
from sluice.generate.params import GenerateInput, GenerateResult
from sluice.generate.stream import Follower, read_stream_sync
from sluice.generate.ttft import ttft_counts
from sluice.jobs import JobStatus
from sluice.queue import QueueClient
from sluice.records import Stat, StreamEvent
from tests.conftest import make_config, on_cluster
from tests.kit.queue import CountingRedis
from tests.waits import redis_now_ms, wait_until

pytestmark = pytest.mark.redis

GEN = {"slots": 4, "max_seq_tokens": 256, "default_max_tokens": 32}


def client(r: redis.Redis, **overrides: Any) -> QueueClient:
    model = {"generate": GEN, **overrides}
    return QueueClient(r, dict(make_config(**model).models))


def submit(qc: QueueClient, n: int = 1, prompt: int = 8, **kw: Any) -> list[str]:
    cfg = qc.ops.model("m")
    jobs = [new_job(cfg, list(range(1, prompt + 1)), temperature=0.0, **kw) for _ in range(n)]
    return [s.id for s in qc.submit("m", jobs)]


def result(ids: tuple[int, ...], text: str, attempt: int = 1) -> GenerateResult:
    return GenerateResult(text, ids, "length", prompt_tokens=8, attempt=attempt)


def test_claim_append_finish_writes_the_stream_and_completes(r: redis.Redis) -> None:
    qc = client(r)
    [jid] = submit(qc)
    reply = run_step(qc, "m", "w1", [], [], free_slots=4)
    [job] = reply.batch.jobs
    assert job.id == jid and job.attempts == 1 and reply.lost == frozenset()
    assert GenerateInput.from_dict(job.input).sampling.max_tokens == 32
    step = run_step(qc, "m", "w1", [Append(jid, 1, 0, (5, 6), "ab", started=True)], [], 3)
    assert step.lost == frozenset() and len(step.batch) == 0
    done = result((5, 6, 7), "abc")
    run_step(qc, "m", "w1", [Append(jid, 1, 2, (7,), "c")], [Finished(jid, 1, done)], 4)

    entries = read_stream_sync(r, "m", jid)
    assert [e.type for e in entries] == [
        StreamEvent.START,
        StreamEvent.TOKENS,
        StreamEvent.TOKENS,
        StreamEvent.END,
    ]
    assert (entries[1].index, entries[1].token_ids, entries[1].text) == (0, (5, 6), "ab")
    assert (entries[2].index, entries[2].token_ids, entries[2].text) == (2, (7,), "c")
    assert entries[3].result == done.to_dict() and {e.attempt for e in entries} == {1}
    record = qc.get(jid)
    assert record.status == JobStatus.SUCCEEDED and record.result == done.to_dict()
    ttl = r.ttl(keys.stream_key("m", jid))
    assert 0 < ttl <= qc.ops.model("m").queue.result_ttl_s
    f = Follower()
    deltas = [d for e in entries for d in f.feed(e)]
    assert "".join(d.text for d in deltas) == "abc" and f.done and f.result == done.to_dict()


def test_a_failure_writes_an_error_entry_and_dead_letters_the_job(r: redis.Redis) -> None:
    qc = client(r)
    [jid] = submit(qc)
    run_step(qc, "m", "w1", [], [], 1)
    run_step(qc, "m", "w1", [Append(jid, 1, 0, started=True)], [Finished(jid, 1, None, "oom")], 0)
    entries = read_stream_sync(r, "m", jid)
    assert [e.type for e in entries] == [StreamEvent.START, StreamEvent.ERROR]
    assert "oom" in (entries[1].error or "")
    assert qc.get(jid).status == JobStatus.FAILED
    assert qc.dead_letters("m") == [jid]


def test_the_stream_is_capped(r: redis.Redis) -> None:
    # the smallest cap the config allows: one attempt of a 62-token slot
    small = {**GEN, "max_seq_tokens": 62, "default_max_tokens": 16, "stream_maxlen": 64}
    qc = client(r, generate=small, batching={"max_attempts": 1})
    [jid] = submit(qc)
    run_step(qc, "m", "w1", [], [], 1)
    for i in range(300):
        run_step(qc, "m", "w1", [Append(jid, 1, i, (i,), "x", started=i == 0)], [], 0)
    # MAXLEN ~ trims whole nodes: about the cap, far below what was written
    assert small["stream_maxlen"] <= r.xlen(keys.stream_key("m", jid)) < 300


def test_a_cancel_makes_the_job_lost_and_ends_its_stream(r: redis.Redis) -> None:
    qc = client(r)
    a, b = submit(qc, 2)
    run_step(qc, "m", "w1", [], [], 2)
    appends = [Append(a, 1, 0, (1,), "a", started=True), Append(b, 1, 0, (1,), "a", started=True)]
    run_step(qc, "m", "w1", appends, [], 0)
    qc.cancel(a)
    step = run_step(qc, "m", "w1", [Append(a, 1, 1, (2,), "b"), Append(b, 1, 1, (2,), "b")], [], 0)
    assert step.lost == frozenset({a})
    entries = read_stream_sync(r, "m", a)
    assert [e.type for e in entries][-1] == StreamEvent.ERROR
    assert all(e.token_ids != (2,) for e in entries)  # nothing more written for it
    again = run_step(qc, "m", "w1", [Append(a, 1, 1, (2,), "b")], [], 0)
    assert again.lost == frozenset({a})
    assert len(read_stream_sync(r, "m", a)) == len(entries)  # one error entry, once


def test_renewal_keeps_a_long_job_past_its_lease(r: redis.Redis) -> None:
    qc = client(r, batching={"lease_s": 0.3})
    [jid] = submit(qc)
    run_step(qc, "m", "w1", [], [], 1)
    start = redis_now_ms(r)
    i = 0
    while redis_now_ms(r) - start < 1000:  # over three leases, renewed every step
        step = run_step(qc, "m", "w1", [Append(jid, 1, i, (i,), "", started=i == 0)], [], 1)
        assert step.lost == frozenset() and len(step.batch) == 0  # never reclaimed
        i += 1
    assert qc.get(jid).status == JobStatus.RUNNING and qc.get(jid).attempts == 1


def test_a_lapsed_lease_is_lost_and_the_next_run_restarts(r: redis.Redis) -> None:
    qc = client(r, batching={"lease_s": 0.2})
    [jid] = submit(qc)
    run_step(qc, "m", "w1", [], [], 1)
    run_step(qc, "m", "w1", [Append(jid, 1, 0, (4, 5), "de", started=True)], [], 0)
    # w1 stops stepping; w2's claim reclaims the lapsed lease and takes the job
    batch = wait_until(lambda: run_step(qc, "m", "w2", [], [], 1).batch.jobs, what="reclaim")
    assert [(j.id, j.attempts) for j in batch] == [(jid, 2)]
    assert run_step(qc, "m", "w1", [Append(jid, 1, 2, (6,), "f")], [], 0).lost == {jid}
    run_step(qc, "m", "w2", [Append(jid, 2, 0, (4, 5, 6), "def", started=True)], [], 0)
    run_step(qc, "m", "w2", [], [Finished(jid, 2, result((4, 5, 6), "def", 2))], 0)
    entries = read_stream_sync(r, "m", jid)
    assert [(e.type, e.attempt) for e in entries] == [
        (StreamEvent.START, 1),
        (StreamEvent.TOKENS, 1),
        (StreamEvent.RESTART, 2),
        (StreamEvent.TOKENS, 2),
        (StreamEvent.END, 2),
    ]
    f = Follower()
    deltas = [d for e in entries for d in f.feed(e)]
    assert "".join(d.text for d in deltas) == "def" and f.restarts == 1
    assert [t for d in deltas for t in d.token_ids] == [4, 5, 6]


def test_ttft_and_the_learned_output_length(r: redis.Redis) -> None:
    qc = client(r)
    jobs = submit(qc, 2)
    run_step(qc, "m", "w1", [], [], 2)
    run_step(qc, "m", "w1", [Append(j, 1, 0, (), "", started=True) for j in jobs], [], 0)
    first = [Append(j, 1, 0, (9,), "z") for j in jobs]
    run_step(qc, "m", "w1", first, [], 0)
    run_step(qc, "m", "w1", [Append(jobs[0], 1, 0, (9,), "z")], [], 0)  # counted once a job
    counts = ttft_counts(r, "m", redis_now_ms(r) / 1000)
    assert sum(counts) == 2
    assert all(int(r.hget(keys.job_key("m", j), "ttft") or -1) >= 0 for j in jobs)
    done = [Finished(jobs[0], 1, result((9,) * 3, "zzz")), Finished(jobs[1], 1, result((9,), "z"))]
    run_step(qc, "m", "w1", [], done, 0)
    stats = qc.stats("m").counters
    assert stats[Stat.GEN_FINISHED] == 2 and stats[Stat.GEN_OUTPUT_TOKENS] == 4
    assert expected_output(stats) == 2.0


def test_the_claim_fills_every_free_slot_whatever_the_costs(r: redis.Redis) -> None:
    qc = client(r)
    ids = submit(qc, 6, prompt=200, max_tokens=56)  # cost near the whole KV budget
    got = run_step(qc, "m", "w1", [], [], 4).batch.jobs
    assert len(got) == 4 and {j.id for j in got} <= set(ids)


@pytest.mark.skipif(on_cluster(), reason="counts the round trips of a single-node client")
def test_a_step_is_one_round_trip(redis_url: str, r: redis.Redis) -> None:
    counting = CountingRedis.from_url(redis_url, decode_responses=True)
    qc = QueueClient(counting, client(r).ops.models)
    ids = submit(qc, 8)
    run_step(qc, "m", "w1", [], [], 2)  # loads the scripts
    claimed = [j.id for j in run_step(qc, "m", "w1", [], [], 2).batch.jobs]
    first = run_step(qc, "m", "w1", [], [], 2).batch.jobs
    CountingRedis.trips = 0
    appends = [Append(j, 1, 0, (1, 2), "ab", started=True) for j in claimed]
    finished = [Finished(j.id, 1, result((1,), "a")) for j in first]
    reply = run_step(qc, "m", "w1", appends, finished, 2)
    assert CountingRedis.trips == 1
    assert len(reply.batch) == 2 and reply.lost == frozenset()
    assert {qc.get(j.id).status for j in first} == {JobStatus.SUCCEEDED}
    assert len(ids) == 8


def test_a_flushed_script_cache_is_reloaded_and_the_step_still_runs(r: redis.Redis) -> None:
    qc = client(r)
    [jid] = submit(qc)
    run_step(qc, "m", "w1", [], [], 1)
    r.script_flush()  # a restarted or failed-over server: no script cached
    [other] = submit(qc)  # the same step's claim finds it
    step = run_step(qc, "m", "w1", [Append(jid, 1, 0, (3,), "c", started=True)], [], 1)
    assert step.lost == frozenset() and [j.id for j in step.batch.jobs] == [other]
    assert [e.type for e in read_stream_sync(r, "m", jid)] == [
        StreamEvent.START,
        StreamEvent.TOKENS,
    ]


def test_the_step_never_claims_a_bulk_item(r: redis.Redis) -> None:
    """A bulk line is no admitted generative input: a generative worker claims only
    the interactive jobs, even with free slots and bulk items waiting."""
    qc = client(r)
    [bulk] = submit(qc, priority="bulk")
    [normal] = submit(qc)
    reply = run_step(qc, "m", "w1", [], [], free_slots=4)
    assert [j.id for j in reply.batch.jobs] == [normal]
    assert run_step(qc, "m", "w1", [], [], free_slots=4).batch.jobs == []
    assert qc.get(bulk).status == JobStatus.QUEUED
