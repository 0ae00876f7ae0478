"""RQ's side on a real Redis: slices run by an RQ worker, the reaper, giving up."""

from __future__ import annotations

import importlib
import time

import pytest
import redis
from rq import Queue, SimpleWorker
from rq.job import Job

from bulkworker import jobs
from sluice import keys
from sluice.bulk import rq_jobs
from sluice.bulk.ops import BulkOps, scripts
from sluice.config import SluiceConfig, parse_config
from sluice.queue import QueueClient
from tests.kit.bulk import MODEL, upload

pytestmark = pytest.mark.redis


@pytest.fixture
def cfg() -> SluiceConfig:
    return parse_config(
        {
            "models": {MODEL: {"handler": "synthetic", "buckets": [8, 64]}},
            "bulk": {"lease_s": 0.3, "poll_s": 0.01, "rq_queue": "bulk-test"},
        }
    )


@pytest.fixture
def q(r: redis.Redis, cfg: SluiceConfig) -> QueueClient:
    client = QueueClient(r, dict(cfg.models))
    client.register(scripts())
    return client


@pytest.fixture
def raw(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def run_rq(cfg: SluiceConfig, q: QueueClient, raw: redis.Redis) -> None:
    jobs.bind(cfg, q)
    SimpleWorker([Queue(cfg.bulk.rq_queue, connection=raw)], connection=raw).work(burst=True)


def test_an_rq_worker_runs_the_slice_to_the_end(
    cfg: SluiceConfig, q: QueueClient, raw: redis.Redis
) -> None:
    # Lines that all fail need no model worker: the slice alone ends the bulk job.
    bulk_id = upload(q, cfg, ["{bad", '{"custom_id": "x"}'])
    slice_id = rq_jobs.enqueue_slice(cfg, q, raw, bulk_id)
    assert Queue(cfg.bulk.rq_queue, connection=raw).job_ids == [slice_id]
    run_rq(cfg, q, raw)
    state = q.run(BulkOps([MODEL], 60).get(bulk_id))
    assert (state.state, state.failed, state.rq_job) == ("completed", 2, slice_id)
    job = Job.fetch(slice_id, connection=raw)
    assert job.get_status() == "finished" and job.return_value() == "finished"


def test_the_reaper_resumes_a_lapsed_bulk_job_once(
    cfg: SluiceConfig, q: QueueClient, raw: redis.Redis
) -> None:
    ops = BulkOps([MODEL], cfg.bulk.ttl_s)
    bulk_id = upload(q, cfg, ["{bad"])
    # A coordinator took it and died: no RQ job waits for it.
    assert q.run(ops.lease(bulk_id, "dead", 300, "take"))[0] == "ok"
    assert jobs.reap(cfg, q, raw) == []  # its lease is still live
    time.sleep(0.35)
    assert jobs.reap(cfg, q, raw) == [bulk_id]
    state = q.run(ops.get(bulk_id))
    assert state.resumes == 1 and state.rq_job is not None
    assert Queue(cfg.bulk.rq_queue, connection=raw).job_ids == [state.rq_job]
    assert jobs.reap(cfg, q, raw) == []  # looked at again only a lease later
    time.sleep(0.35)
    assert jobs.reap(cfg, q, raw) == []  # its slice is queued: it will run
    run_rq(cfg, q, raw)  # the resumed slice waits out the dead lease, then ends it
    assert q.run(ops.get(bulk_id)).state == "completed"
    assert jobs.reap(cfg, q, raw) == []
    assert raw.zcard(keys.bulk_active_key(MODEL)) == 0


def test_the_reaper_fails_a_bulk_job_that_never_progresses(
    cfg: SluiceConfig, q: QueueClient, raw: redis.Redis
) -> None:
    ops = BulkOps([MODEL], cfg.bulk.ttl_s)
    bulk_id = upload(q, cfg, ['{"input": "a"}'])
    q.run(ops.set_fields(bulk_id, resumes=jobs.MAX_RESUMES))
    time.sleep(0.55)  # the upload's grace (500 ms) lapses with no coordinator
    assert jobs.reap(cfg, q, raw) == []
    state = q.run(ops.get(bulk_id))
    assert state.state == "failed" and state.error is not None
    assert state.error["type"] == "coordinator_failed"
    assert raw.zcard(keys.bulk_active_key(MODEL)) == 0


def test_a_slice_without_a_bound_worker_says_how_to_run_one() -> None:
    jobs._BOUND = None
    with pytest.raises(RuntimeError, match="sluice bulk worker"):
        jobs.run_slice("m.bulk1")


def test_a_slice_is_queued_by_the_path_of_the_bulk_workers_job_function() -> None:
    # The gateway queues first slices by this name, without importing bulkworker.
    module, _, name = rq_jobs.SLICE_JOB.rpartition(".")
    assert getattr(importlib.import_module(module), name) is jobs.run_slice


def test_sluice_status_lists_unfinished_bulk_jobs(q: QueueClient, cfg: SluiceConfig) -> None:
    from rich.console import Console

    from sluice.status import bulk_table

    assert bulk_table(q, cfg) is None
    bulk_id = upload(q, cfg, ["{bad", "{bad"])
    table = bulk_table(q, cfg)
    assert table is not None
    console = Console(width=200, record=True)
    console.print(table)
    text = console.export_text()
    assert bulk_id in text and "queued" in text and "0/2" in text
