"""The generative step where runs race (ADR 0146): the same worker claiming its
own lapsed job again, a late result, a late failure, durability, a blocking read."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from sluice.errors import NotReplicated
from sluice.generate.admission import new_job
from sluice.generate.ops import Append, Finished, run_step
from sluice.generate.params import GenerateResult
from sluice.generate.stream import read_stream, read_stream_sync
from sluice.jobs import JobStatus
from sluice.queue import QueueClient
from sluice.queue.client import connect_async
from sluice.records import StreamEvent
from tests.conftest import make_config, on_cluster
from tests.waits import wait_until

pytestmark = pytest.mark.redis

GEN = {"slots": 4, "max_seq_tokens": 256, "default_max_tokens": 32}


def client(r: redis.Redis, **overrides: Any) -> QueueClient:
    return QueueClient(r, dict(make_config(generate=GEN, **overrides).models))


def submit_one(qc: QueueClient) -> str:
    job = new_job(qc.ops.model("m"), [1, 2, 3], temperature=0.0)
    return qc.submit("m", [job])[0].id


def done(attempt: int = 1) -> GenerateResult:
    return GenerateResult("ab", (1, 2), "stop", prompt_tokens=3, attempt=attempt)


def lapse_and_take(qc: QueueClient, worker: str) -> int:
    """Wait for the lease to lapse; ``worker`` claims the job again: its attempt."""
    jobs = wait_until(lambda: run_step(qc, "m", worker, [], [], 1).batch.jobs, what="reclaim")
    return jobs[0].attempts


def test_the_same_worker_claiming_its_lapsed_job_again_is_a_new_run(r: redis.Redis) -> None:
    qc = client(r, batching={"lease_s": 0.2})
    jid = submit_one(qc)
    run_step(qc, "m", "w1", [], [], 1)
    assert lapse_and_take(qc, "w1") == 2
    # the slot still running attempt 1 is told to stop; attempt 2 goes on
    assert run_step(qc, "m", "w1", [Append(jid, 1, 0, (1,), "a", True)], [], 0).lost == {jid}
    assert run_step(qc, "m", "w1", [Append(jid, 2, 0, (1,), "a", True)], [], 0).lost == set()
    entries = read_stream_sync(r, "m", jid)
    assert [(e.type, e.attempt) for e in entries] == [
        (StreamEvent.RESTART, 2),
        (StreamEvent.TOKENS, 2),
    ]


def test_a_late_result_wins_like_complete_and_the_stream_says_so(r: redis.Redis) -> None:
    qc = client(r, batching={"lease_s": 0.2})
    jid = submit_one(qc)
    run_step(qc, "m", "w1", [], [], 1)
    lapse_and_take(qc, "w2")
    run_step(qc, "m", "w2", [Append(jid, 2, 0, (1,), "a", True)], [], 0)
    run_step(qc, "m", "w1", [], [Finished(jid, 1, done())], 0)  # w1 finished after all
    assert qc.get(jid).status == JobStatus.SUCCEEDED
    assert read_stream_sync(r, "m", jid)[-1].type == StreamEvent.END
    # w2's run is over: told so at its next step, and it writes nothing more
    assert run_step(qc, "m", "w2", [Append(jid, 2, 1, (2,), "b")], [], 0).lost == {jid}
    assert read_stream_sync(r, "m", jid)[-1].type == StreamEvent.END


def test_a_late_failure_is_not_written_and_the_job_runs_on(r: redis.Redis) -> None:
    qc = client(r, batching={"lease_s": 0.2})
    jid = submit_one(qc)
    run_step(qc, "m", "w1", [], [], 1)
    lapse_and_take(qc, "w2")
    run_step(qc, "m", "w1", [], [Finished(jid, 1, None, "boom")], 0)
    assert qc.get(jid).status == JobStatus.RUNNING
    assert all(e.type != StreamEvent.ERROR for e in read_stream_sync(r, "m", jid))


@pytest.mark.skipif(on_cluster(), reason="durability: replica is refused on a cluster")
def test_a_durable_models_complete_waits_for_a_replica_in_the_same_pipeline(
    r: redis.Redis,
) -> None:
    plain = client(r)
    durable = client(r, queue={"durability": "replica", "replica_ack_timeout_ms": 10})
    jid = submit_one(plain)
    run_step(plain, "m", "w1", [], [], 1)
    # no replica here: the WAIT after complete counts none, and the step says so
    with pytest.raises(NotReplicated, match="no replica confirmed"):
        run_step(durable, "m", "w1", [], [Finished(jid, 1, done())], 0)
    assert plain.get(jid).status == JobStatus.SUCCEEDED  # on the primary alone


def test_an_async_reader_blocks_until_the_next_entry(redis_url: str, r: redis.Redis) -> None:
    qc = client(r)
    jid = submit_one(qc)
    run_step(qc, "m", "w1", [], [], 1)
    run_step(qc, "m", "w1", [Append(jid, 1, 0, (), "", True)], [], 0)
    [start] = read_stream_sync(r, "m", jid)

    async def follow() -> list[Any]:
        ar = connect_async(redis_url)
        try:
            reading = asyncio.ensure_future(read_stream(ar, "m", jid, start.id, block_ms=60_000))
            await asyncio.sleep(0)  # the read is sent before the entry is written
            await asyncio.to_thread(run_step, qc, "m", "w1", [Append(jid, 1, 0, (7,), "g")], [], 0)
            return await reading
        finally:
            await ar.aclose()

    [entry] = asyncio.run(follow())
    assert (entry.type, entry.token_ids, entry.text) == (StreamEvent.TOKENS, (7,), "g")
    assert asyncio.run(_empty(redis_url, jid)) == []


async def _empty(url: str, jid: str) -> list[Any]:
    ar = connect_async(url)
    try:
        return await read_stream(ar, "m", jid, "$", block_ms=10)  # nothing new came
    finally:
        await ar.aclose()


def test_a_lone_surrogate_in_one_sequences_text_loses_no_step(r: redis.Redis) -> None:
    qc = client(r)
    a, b = (submit_one(qc) for _ in range(2))
    run_step(qc, "m", "w1", [], [], 2)
    appends = [Append(a, 1, 0, (1,), "x\ud800?", True), Append(b, 1, 0, (1,), "ok", True)]
    assert run_step(qc, "m", "w1", appends, [], 0).lost == set()
    assert read_stream_sync(r, "m", a)[-1].text == "x\ufffd?"
    assert read_stream_sync(r, "m", b)[-1].text == "ok"
