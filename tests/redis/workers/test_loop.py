"""The batch loop against a real Redis: results, faults, drain, leases, heartbeats."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from sluice import keys, registry
from sluice.jobs import JobStatus
from sluice.queue import QueueClient
from tests.kit.fault_handlers import OomHandler
from tests.kit.workers import MODEL, Running, submit, worker_config
from tests.waits import wait_until
from workers.handlers import HandlerContext, make_handler
from workers.worker import EXIT_LOAD_FAILED, EXIT_OK, EXIT_QUARANTINED

pytestmark = pytest.mark.redis
StartWorker = Callable[..., Running]


def client(r: redis.Redis, cfg: object) -> QueueClient:
    return QueueClient(r, dict(cfg.models))  # type: ignore[attr-defined]


def workers(qc: QueueClient) -> list[registry.WorkerInfo]:
    return qc.run(registry.list_workers_call(MODEL))[0]


@pytest.mark.parametrize("overlap", [True, False])
def test_results_are_correct_and_matched_to_their_jobs(
    r: redis.Redis, start_worker: StartWorker, overlap: bool
) -> None:
    cfg = worker_config()
    qc = client(r, cfg)
    texts = [" ".join(f"w{i}" for i in range(n)) for n in (1, 5, 40, 3, 200, 17, 90, 2) * 4]
    ids = submit(qc, cfg, texts)
    assert start_worker(cfg, burst=True, overlap=overlap).join() == EXIT_OK
    solo = make_handler(HandlerContext(MODEL, cfg.model(MODEL)))
    solo.load()
    for job_id, text in zip(ids, texts, strict=True):
        rec = qc.get(job_id)
        assert rec.status == JobStatus.SUCCEEDED
        c = solo.collate([text], [1])  # the same text alone gives the same vector
        assert rec.result == solo.postprocess(solo.infer(c), c)[0]
    assert qc.stats(MODEL).counters["succeeded"] == len(texts)


def test_heartbeat_reports_ready_rate_and_deregisters_on_drain(
    r: redis.Redis, start_worker: StartWorker
) -> None:
    cfg = worker_config("synthetic", {"base_ms": 1, "per_token_ms": 0.01})
    qc = client(r, cfg)
    submit(qc, cfg, ["a b c"] * 40)
    run = start_worker(cfg, buckets=["32", "128"])
    wait_until(lambda: qc.stats(MODEL).counters.get("succeeded") == 40)
    info = wait_until(lambda: [w for w in workers(qc) if w.jobs == 40])[0]
    assert (info.state, info.buckets, info.id) == ("ready", ["32", "128"], run.worker.id)
    assert info.ready_at is not None and info.ready_at >= info.started_at
    assert info.service_rate > 0  # cost units per busy second
    assert info.extra["padding_efficiency"] == pytest.approx(1.0)  # all inputs the same length
    r.rpush(*registry.send_control(MODEL, run.worker.id)[0][1:])  # the drain command
    assert run.join() == EXIT_OK
    assert workers(qc) == [] and not r.exists(keys.worker_key(MODEL, run.worker.id))


def test_serves_only_its_buckets(r: redis.Redis, start_worker: StartWorker) -> None:
    cfg = worker_config("synthetic", {"base_ms": 0, "per_token_ms": 0})
    qc = client(r, cfg)
    short, long = submit(qc, cfg, ["a"] * 5), submit(qc, cfg, ["b " * 100] * 3)
    assert start_worker(cfg, buckets=["32"], burst=True).join() == EXIT_OK
    assert all(qc.get(i).status == JobStatus.SUCCEEDED for i in short)
    assert all(qc.get(i).status == JobStatus.QUEUED for i in long)


def test_poison_input_fails_alone_end_to_end(r: redis.Redis, start_worker: StartWorker) -> None:
    cfg = worker_config("tests.kit.fault_handlers:PoisonHandler")
    qc = client(r, cfg)
    ids = submit(qc, cfg, ["fine one", "a poison pill", "fine two", "fine three"])
    assert start_worker(cfg, burst=True).join() == EXIT_OK
    recs = [qc.get(i) for i in ids]
    assert [x.status for x in recs] == ["succeeded", "failed", "succeeded", "succeeded"]
    assert recs[1].error == {"type": "ValueError", "message": "poison input"}
    assert qc.dead_letters(MODEL) == [ids[1]]
    assert recs[1].attempts == 1  # failed at once, not retried into the queue again


def test_oom_splits_and_lowers_the_token_budget(r: redis.Redis, start_worker: StartWorker) -> None:
    OomHandler.seen.clear()
    cfg = worker_config("tests.kit.fault_handlers:OomHandler", {"oom_above": 40})
    qc = client(r, cfg)
    ids = submit(qc, cfg, ["a b c d e f g h i j"] * 8)  # 8 x 10 tokens in one claim
    run = start_worker(cfg, burst=True, overlap=False)
    assert run.join() == EXIT_OK
    assert all(qc.get(i).status == JobStatus.SUCCEEDED for i in ids)
    assert max(OomHandler.seen) <= 4  # 8 x 10 = 80 > 40 split into halves of 4 x 10
    assert run.worker.budget.current == 40  # half of the failed batch's cost (80)


def test_quarantines_instead_of_draining_the_queue_into_errors(
    r: redis.Redis, start_worker: StartWorker
) -> None:
    cfg = worker_config(
        "tests.kit.fault_handlers:BrokenHandler",
        batching={"max_batch": 2, "max_attempts": 50},
        worker={"quarantine_after_failures": 3, "quarantine_grace_s": 1.0},
    )
    qc = client(r, cfg)
    ids = submit(qc, cfg, [f"job {i}" for i in range(20)])
    run = start_worker(cfg)
    wait_until(lambda: [w for w in workers(qc) if w.state == "quarantined"])
    assert run.join() == EXIT_QUARANTINED
    stats = qc.stats(MODEL)
    assert stats.counters.get("failed", 0) == 0  # nothing dead-lettered
    assert stats.queued == len(ids) and stats.in_flight == 0  # all back in the queue
    assert run.worker.status.info.failures == 3


def lease_expiries_ms(r: redis.Redis) -> list[float]:
    pairs: list[tuple[str, float]] = r.zrange(keys.inflight_key(MODEL), 0, -1, withscores=True)  # type: ignore[assignment]
    return [score for _, score in pairs]


def test_renews_leases_while_a_long_batch_runs(r: redis.Redis, start_worker: StartWorker) -> None:
    # One batch sleeps 2.5 s; the lease is 1 s, so it lapses unless renewed.
    cfg = worker_config(
        "synthetic", {"base_ms": 2500, "per_token_ms": 0}, batching={"lease_s": 1.0}
    )
    qc = client(r, cfg)
    ids = submit(qc, cfg, ["x"] * 4)
    run = start_worker(cfg, overlap=False)
    wait_until(lambda: qc.stats(MODEL).in_flight == 4)
    first_expiry_ms = max(lease_expiries_ms(r))
    expiries_ms = [first_expiry_ms]

    def done_and_never_reclaimed() -> bool:
        # What any other worker's claim does, mid-batch: polled all through the
        # 2.5 s batch, so an unrenewed 1 s lease would be caught however slow the machine.
        assert qc.reclaim(MODEL) == 0
        expiries_ms.extend(lease_expiries_ms(r))
        return qc.stats(MODEL).counters.get("succeeded") == 4

    wait_until(done_and_never_reclaimed, what="the long batch to finish", every_s=0.05)
    assert max(expiries_ms) > first_expiry_ms  # the lease was pushed on while it ran
    assert [qc.get(i).attempts for i in ids] == [1, 1, 1, 1]
    assert qc.stats(MODEL).counters.get("retried", 0) == 0
    run.worker.drain()
    assert run.join() == EXIT_OK


def test_drain_finishes_the_batches_it_holds(r: redis.Redis, start_worker: StartWorker) -> None:
    cfg = worker_config("synthetic", {"base_ms": 400, "per_token_ms": 0}, batching={"max_batch": 2})
    qc = client(r, cfg)
    submit(qc, cfg, ["x"] * 10)
    run = start_worker(cfg, overlap=True)
    wait_until(lambda: qc.stats(MODEL).in_flight == 4)  # one batch running, one prefetched
    run.worker.drain()
    assert run.join() == EXIT_OK
    stats = qc.stats(MODEL)
    assert stats.in_flight == 0  # nothing left leased: it finished what it held
    assert stats.counters.get("retried", 0) == 0  # and handed nothing back
    assert stats.counters["succeeded"] + stats.queued == 10
    assert stats.queued >= 2  # it stopped claiming


def test_oom_at_warm_up_caps_the_token_budget(r: redis.Redis, start_worker: StartWorker) -> None:
    # Bucket 32, batches of 8: the warm-up shape is 8 x 32 = 256 tokens; 64 fit.
    cfg = worker_config(
        "tests.kit.fault_handlers:OomHandler",
        {"oom_above": 64, "oom_in_warmup": True},
        buckets=[32],
    )
    qc = client(r, cfg)
    ids = submit(qc, cfg, ["a b"] * 6)
    run = start_worker(cfg, burst=True)
    assert run.join() == EXIT_OK
    assert run.worker.budget.ceiling == 64  # 256 -> 128 -> 64 at warm-up
    assert all(qc.get(i).status == JobStatus.SUCCEEDED for i in ids)


def test_a_model_that_cannot_load_exits_non_zero(r: redis.Redis, start_worker: StartWorker) -> None:
    cfg = worker_config(
        "tests.kit.fault_handlers:OomHandler",
        {"oom_above": 8, "oom_in_warmup": True},
        buckets=[32],
    )
    run = start_worker(cfg)
    assert run.join() == EXIT_LOAD_FAILED  # even one input of 32 tokens does not fit
    assert workers(client(r, cfg)) == []  # and it deregistered


def test_a_result_that_is_not_json_fails_alone(r: redis.Redis, start_worker: StartWorker) -> None:
    cfg = worker_config("tests.kit.fault_handlers:NotJsonHandler", {"base_ms": 0})
    qc = client(r, cfg)
    ids = submit(qc, cfg, ["a b c", "a b"])  # costs 3 (bad) and 2
    assert start_worker(cfg, burst=True).join() == EXIT_OK
    bad, good = qc.get(ids[0]), qc.get(ids[1])
    assert bad.status == JobStatus.FAILED and bad.error is not None
    assert bad.error["type"] == "result_not_json"
    assert good.status == JobStatus.SUCCEEDED and good.result == {"tokens": 2}


def test_a_plain_string_drain_command_works_too(r: redis.Redis, start_worker: StartWorker) -> None:
    cfg = worker_config("synthetic", {"base_ms": 0, "per_token_ms": 0})
    run = start_worker(cfg)
    wait_until(lambda: run.worker.status.state == "ready")
    r.set(keys.worker_control_key(MODEL, run.worker.id), "drain")  # typed by hand
    assert run.join(timeout_s=5) == EXIT_OK
    assert not r.exists(keys.worker_control_key(MODEL, run.worker.id))
