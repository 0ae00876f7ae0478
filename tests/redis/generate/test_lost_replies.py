"""Step round trips whose reply is lost after the server ran them (ADR 0146): the
loop sends the same step again, and nothing reaches a follower twice."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from sluice import keys
from sluice.errors import RedisUnavailable
from sluice.generate.admission import new_job
from sluice.generate.ops import Append, StepReply, run_step
from sluice.generate.stream import Follower, read_stream_sync
from sluice.jobs import JobStatus
from sluice.queue import QueueClient
from sluice.records import StreamEvent
from tests.conftest import make_config

pytestmark = pytest.mark.redis
Make = Callable[..., Any]
MODEL = "gen"


def flaky(lose: set[int]) -> Callable[..., StepReply]:
    """run_step whose n-th calls (1-based, in ``lose``) run on the server but lose
    their reply."""
    calls = [0]

    def step(*a: Any, **kw: Any) -> StepReply:
        calls[0] += 1
        reply = run_step(*a, **kw)
        if calls[0] in lose:
            raise RedisUnavailable("read timed out")
        return reply

    return step


def follow(r: redis.Redis, job: str) -> Follower:
    f = Follower()
    for entry in read_stream_sync(r, MODEL, job):
        f.feed(entry)
    return f


@pytest.mark.parametrize("lost", [{2}, {4}, {3, 5}, {2, 3, 4}])
def test_a_step_re_sent_after_a_lost_reply_writes_each_entry_once(
    gen: Make, lost: set[int]
) -> None:
    g = gen(step=flaky(lost))
    job = g.submit((5, 6, 7), 6)
    g.until_idle()
    rec = g.qc.get(job)
    assert rec.status == JobStatus.SUCCEEDED
    entries = read_stream_sync(g.qc.redis, MODEL, job)
    assert [e.type for e in entries].count(StreamEvent.START) == 1
    assert [e.index for e in entries if e.type == StreamEvent.TOKENS] == list(range(6))
    f = follow(g.qc.redis, job)
    assert f.text == rec.result["text"] == g.expected((5, 6, 7), 6)


def test_the_same_append_twice_renews_the_lease_but_writes_once(r: redis.Redis) -> None:
    qc = client(r)
    [job] = [s.id for s in qc.submit("m", [new_job(qc.ops.model("m"), [1, 2, 3])])]
    run_step(qc, "m", "w1", [], [], free_slots=1)
    step = [Append(job, 1, 0, (5, 6), "ab", started=True)]
    run_step(qc, "m", "w1", step, [], 0)
    r.zadd(keys.inflight_key("m"), {job: 1}, xx=True)  # about to lapse
    again = run_step(qc, "m", "w1", step, [], 0)
    assert again.lost == frozenset()
    renewed = r.zscore(keys.inflight_key("m"), job)
    assert renewed is not None and renewed > again.now_ms  # the re-sent step renewed it
    types = [e.type for e in read_stream_sync(r, "m", job)]
    assert types == [StreamEvent.START, StreamEvent.TOKENS]
    run_step(qc, "m", "w1", [Append(job, 1, 2, (), "!")], [], 0)  # a final flush: once
    run_step(qc, "m", "w1", [Append(job, 1, 2, (), "!")], [], 0)
    run_step(qc, "m", "w1", [Append(job, 1, 2, (7,), "c")], [], 0)
    entries = read_stream_sync(r, "m", job)
    assert [(e.index, e.text) for e in entries if e.type == StreamEvent.TOKENS] == [
        (0, "ab"),
        (2, "!"),
        (2, "c"),
    ]


def client(r: redis.Redis) -> QueueClient:
    gen = {"slots": 4, "max_seq_tokens": 256, "default_max_tokens": 32}
    return QueueClient(r, dict(make_config(generate=gen).models))


@pytest.mark.parametrize("lost", [{1}, {1, 2}, {2}])
def test_jobs_claimed_by_a_step_whose_reply_was_lost_are_released_then_run(
    gen: Make, lost: set[int]
) -> None:
    g = gen(slots=2, step=flaky(lost))
    first = g.submit((1, 2), 4)
    if 2 in lost:  # a second claim, lost while the first job runs
        g.loop.turn()
    second = g.submit((3, 4), 3)
    turn = g.loop.turn()
    assert turn.error is not None  # the claim ran on the server, its reply was lost
    g.until_idle()
    for job, prompt, n in ((first, (1, 2), 4), (second, (3, 4), 3)):
        rec = g.qc.get(job)
        assert rec.status == JobStatus.SUCCEEDED, (job, rec.status)
        assert rec.attempts == 1, "the stranded claim's attempt was undone"
        assert rec.result["text"] == g.expected(prompt, n)
        assert follow(g.qc.redis, job).text == rec.result["text"]
    assert g.qc.redis.zcard(keys.inflight_key(MODEL)) == 0
