"""Malformed jobs that reach a worker (written by an older gateway or another client).

Each test queues well-formed jobs through the protocol, then corrupts some of
their hashes straight in Redis, as a client that skipped the gateway would.
A bad job must fail alone, with an error in its record that names the problem
and no retry spent on it; the rest of its batch succeeds; the worker goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from sluice import keys
from sluice.jobs import JobStatus
from sluice.queue import QueueClient
from tests.kit.workers import MODEL, Running, submit, worker_config
from tests.waits import wait_until
from workers.worker import EXIT_OK

pytestmark = pytest.mark.redis
StartWorker = Callable[..., Running]

# name -> (how the hash is corrupted, the error type, words its message must hold)
Corruption = Callable[[redis.Redis, str], None]


def hset(**fields: str) -> Corruption:
    return lambda r, jk: r.hset(jk, mapping=fields)  # type: ignore[return-value]


def hdel(*names: str) -> Corruption:
    return lambda r, jk: r.hdel(jk, *names)  # type: ignore[return-value]


BAD: dict[str, tuple[Corruption, str, str]] = {
    "input-not-json": (hset(input="{not json"), "malformed_job", "not valid JSON"),
    "input-truncated": (hset(input='{"text": "cut of'), "malformed_job", "not valid JSON"),
    "input-wrong-type": (hset(input="42"), "InvalidInput", "input must be a string"),
    "input-object-without-text": (hset(input='{"txt": "a"}'), "InvalidInput", "input must be"),
    "input-lone-surrogate": (hset(input='"bad \\ud800 half"'), "InvalidInput", "surrogate"),
    "input-missing": (hdel("input"), "malformed_job", "input"),
    "enq-missing": (hdel("enq"), "malformed_job", "enq"),
    "cost-garbage": (hset(cost="lots"), "malformed_job", "cost"),
    "attempts-garbage": (hset(att="x"), "malformed_job", "att"),
    "deadline-garbage": (hset(dl="soon"), "malformed_job", "dl"),
    "bucket-missing": (hdel("bucket"), "malformed_job", "bucket"),
}


def client(r: redis.Redis, cfg: Any) -> QueueClient:
    return QueueClient(r, dict(cfg.models))


def corrupt(r: redis.Redis, job_id: str, how: Corruption) -> None:
    how(r, keys.job_key(MODEL, job_id))


def write_raw(r: redis.Redis, n: int, input_json: str) -> str:
    """A job written the way another client might: hash + queue entry + wake token,
    in one MULTI so a worker never sees half of it."""
    job_id = f"{MODEL}.raw{n:04d}"
    now_ms = int(time.time() * 1000)
    fields = {
        "id": job_id,
        "bucket": "32",
        "cost": "2",
        "prio": "1",
        "status": "queued",
        "input": input_json,
        "enq": str(now_ms),
        "dl": "0",
        "att": "0",
        "score": str(10**12 + n),
    }
    pipe = r.pipeline(transaction=True)
    pipe.hset(keys.job_key(MODEL, job_id), mapping=fields)
    pipe.zadd(keys.queue_key(MODEL, "32"), {job_id: 10**12 + n})
    pipe.lpush(keys.wake_key(MODEL, "32"), "1")
    pipe.execute()
    return job_id


def test_each_malformed_job_fails_alone_and_its_batch_succeeds(
    r: redis.Redis, start_worker: StartWorker
) -> None:
    cfg = worker_config(batching={"max_batch": 32})
    qc = client(r, cfg)
    names = sorted(BAD)
    # good, bad, good, bad, ...: every bad job shares its batch with good ones
    ids = submit(qc, cfg, [f"text number {i}" for i in range(2 * len(names) + 1)])
    bad = dict(zip(names, ids[1::2], strict=False))
    good = ids[0::2]
    for name, job_id in bad.items():
        corrupt(r, job_id, BAD[name][0])
    meta_garbage = good[0]
    r.hset(keys.job_key(MODEL, meta_garbage), "meta", "{{{ not json")
    deleted = good.pop()  # its hash is gone before any claim: a stale queue entry
    r.delete(keys.job_key(MODEL, deleted))

    run = start_worker(cfg, burst=True)
    assert run.join() == EXIT_OK

    for job_id in good:
        rec = qc.get(job_id)
        assert rec.status == JobStatus.SUCCEEDED, (job_id, rec.error)
        assert len(rec.result["vector"]) == 8
    assert qc.get(meta_garbage).metadata is None  # unreadable metadata reads as none
    for name, job_id in bad.items():
        rec = qc.get(job_id)
        _, err_type, words = BAD[name]
        assert rec.status == JobStatus.FAILED, (name, rec)
        assert rec.error is not None and rec.error["type"] == err_type, (name, rec.error)
        assert words in rec.error["message"], (name, rec.error)
        assert rec.attempts <= 1, name  # failed for good, never retried
    stats = qc.stats(MODEL)
    assert stats.counters.get("retried", 0) == 0
    assert stats.counters["failed"] == len(bad)
    assert stats.counters["succeeded"] == len(good)
    assert stats.queued == 0 and stats.in_flight == 0
    assert set(qc.dead_letters(MODEL)) == set(bad.values())
    assert not r.exists(keys.job_key(MODEL, deleted))
    assert run.worker.streak.count == 0  # bad inputs are not this worker's failures
    assert run.worker.status.snapshot().batches == 1  # good and bad shared one batch


def test_a_stream_of_bad_jobs_never_quarantines_the_worker(
    r: redis.Redis, start_worker: StartWorker
) -> None:
    cfg = worker_config(worker={"quarantine_after_failures": 2})
    qc = client(r, cfg)
    run = start_worker(cfg)
    wait_until(lambda: run.worker.status.state == "ready")
    bad_ids = []
    for i in range(6):  # batches of one bad job each: 3x the quarantine threshold
        job_id = write_raw(r, i, ["[1, 2]", "not json", '"\\udc00"'][i % 3])
        bad_ids.append(job_id)
        wait_until(lambda j=job_id: qc.get(j).status == JobStatus.FAILED)
    good = submit(qc, cfg, ["still serving"])[0]
    wait_until(lambda: qc.get(good).status == JobStatus.SUCCEEDED)
    assert run.worker.status.state == "ready" and run.thread.is_alive()
    assert all(qc.get(j).attempts <= 1 for j in bad_ids)


def test_the_gateway_reads_a_malformed_job_record(r: redis.Redis) -> None:
    cfg = worker_config()
    qc = client(r, cfg)
    job_id = submit(qc, cfg, ["x"])[0]
    jk = keys.job_key(MODEL, job_id)
    r.hset(jk, mapping={"meta": "nope", "result": "{bad", "error": "[", "run_ms": "fast"})
    rec = qc.get(job_id)  # no exception: the fields that cannot be read are None
    assert (rec.metadata, rec.result, rec.error, rec.run_ms) == (None, None, None, None)
    r.hdel(jk, "enq", "cost", "bucket", "prio", "att")
    rec = qc.get(job_id)
    assert (rec.status, rec.cost, rec.bucket, rec.attempts) == (JobStatus.QUEUED, 0, "", 0)
    assert rec.timings["queued_at"] == 0


def test_a_status_nobody_wrote_reads_as_a_failed_job_saying_why(r: redis.Redis) -> None:
    cfg = worker_config()
    qc = client(r, cfg)
    job_id = submit(qc, cfg, ["x"])[0]
    r.hset(keys.job_key(MODEL, job_id), "status", "zombie")
    rec = qc.get(job_id)
    assert rec.status == JobStatus.FAILED and rec.id == job_id
    assert rec.error == {
        "type": "malformed_job",
        "message": "job record unusable: 'zombie' is not a job status",
    }


def test_the_runner_fails_bad_jobs_without_breaking_the_batch() -> None:
    from sluice.errors import InvalidInput
    from sluice.jobs import ClaimedJob
    from workers.execute import BatchRunner
    from workers.handlers import HandlerContext
    from workers.handlers.synthetic import SyntheticHandler

    seen: list[list[Any]] = []

    class Recording(SyntheticHandler):
        def validate(self, value: Any) -> None:
            if not isinstance(value, str):
                raise InvalidInput("input must be a string")

        def collate(self, inputs: list[Any], costs: list[int]) -> Any:
            seen.append(inputs)
            return super().collate(inputs, costs)

    cfg = worker_config("synthetic", {"base_ms": 0, "per_token_ms": 0})
    handler = Recording(HandlerContext(MODEL, cfg.model(MODEL)))
    handler.load()
    jobs = [
        ClaimedJob("m.a", "fine", 1, 1, 0),
        ClaimedJob("m.b", None, 1, 1, 0, malformed="stored input is not valid JSON (x)"),
        ClaimedJob("m.c", "also fine", 2, 1, 0),
        ClaimedJob("m.d", 42, 1, 1, 0),
    ]
    res = BatchRunner(handler).run(jobs)
    kinds = {o.id: (o.kind, o.payload) for o in res.outcomes}
    bad = {"type": "malformed_job", "message": "stored input is not valid JSON (x)"}
    assert kinds["m.b"] == ("fail", bad)
    assert kinds["m.a"][0] == kinds["m.c"][0] == "ok"
    assert kinds["m.d"] == ("fail", {"type": "InvalidInput", "message": "input must be a string"})
    assert not res.failed and res.errors == {"malformed_job": 1, "InvalidInput": 1}
    # One collate of the good jobs: the bad ones never reached it, and no item-by-item retry.
    assert seen == [["fine", "also fine"]]
