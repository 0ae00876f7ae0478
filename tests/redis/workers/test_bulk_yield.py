"""Bulk that yields (ADR 0155) on a real Redis: a bulk batch stopped between
micro-batches for an interactive job gives its other items back once, with no
attempt used and no failure counted, and its bulk job still ends with every line
once and the right counts."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from bulkworker.coordinator import Coordinator
from sluice import keys
from sluice.bulk.ops import BulkOps, new_bulk_id, scripts
from sluice.config import SluiceConfig, parse_config
from sluice.jobs import JobStatus, Outcome
from sluice.queue import QueueClient
from sluice.records import JobField as J
from tests.kit.workers import MODEL, Running, submit
from tests.kit.yield_handlers import GateHandler
from tests.waits import wait_until
from workers.execute import BatchRunner
from workers.handlers import HandlerContext, make_handler
from workers.yielding import BulkYield, InteractiveProbe

pytestmark = pytest.mark.redis
LINES = 10


def config(handler: str = "synthetic") -> SluiceConfig:
    return parse_config(
        {
            "models": {
                MODEL: {
                    "handler": handler,
                    "params": {"base_ms": 1, "per_token_ms": 0.01},
                    "buckets": [32],
                    "cost": {"method": "words"},
                    "batching": {"max_batch": 4, "lease_s": 5},
                    "bulk": {"max_batch": 4, "max_queued": LINES, "micro_batch": 1},
                }
            },
            "bulk": {"lease_s": 2, "poll_s": 0.01, "feed_chunk": LINES, "slice_s": 20},
            "worker": {"heartbeat_s": 0.2},
        }
    )


def client(r: redis.Redis, cfg: SluiceConfig) -> QueueClient:
    qc = QueueClient(r, dict(cfg.models))
    qc.register(scripts())
    return qc


def upload(qc: QueueClient, cfg: SluiceConfig) -> str:
    bulk_id = new_bulk_id(MODEL)
    lines = [json.dumps({"input": f"line {i}", "custom_id": f"c{i}"}) for i in range(LINES)]
    qc.run(BulkOps([MODEL], cfg.bulk.ttl_s).create(MODEL, bulk_id, lines, None, 0, 500))
    return bulk_id


def bulk_queued(r: redis.Redis) -> int:
    return int(r.zcount(keys.queue_key(MODEL, "32"), 3e12, "+inf"))


def finish(c: Coordinator, work: Callable[[], Any] = lambda: None) -> str:
    for _ in range(500):
        outcome = c.step()
        if outcome != "more":
            return outcome
        work()
    raise AssertionError("the bulk job did not finish")


def assert_every_line_once(qc: QueueClient, r: redis.Redis, bulk_id: str) -> None:
    state = qc.run(BulkOps([MODEL], 60).get(bulk_id))
    assert (state.state, state.succeeded, state.failed) == ("completed", LINES, 0)
    raw = r.hmget(keys.bulk_output_key(MODEL, bulk_id), list(range(LINES)))
    out = [json.loads(x or "null") for x in raw]
    assert [o["custom_id"] for o in out] == [f"c{i}" for i in range(LINES)]
    assert {o["status"] for o in out} == {"succeeded"}
    assert r.llen(keys.dead_letter_key(MODEL)) == 0


def test_the_released_items_go_back_in_place_with_no_attempt_used(r: redis.Redis) -> None:
    cfg = config()
    qc = client(r, cfg)
    bulk_id = upload(qc, cfg)
    c = Coordinator(qc, cfg, bulk_id)
    assert c._take() == "ok" and c.step() == "more" and bulk_queued(r) == LINES
    batch = qc.claim(MODEL, "w1")
    assert batch.bulk and len(batch) == 4 and all(j.attempts == 1 for j in batch.jobs)
    (interactive,) = submit(qc, cfg, ["a question"])
    y = BulkYield(InteractiveProbe(r, MODEL, ["32"]), 1, CollectorRegistry())
    h = make_handler(HandlerContext(MODEL, cfg.model(MODEL)))
    h.load()
    ran, result, released = y.run(BatchRunner(h), batch)
    assert len(ran) == 1 and len(released) == 3
    assert qc.complete(MODEL, result.outcomes + released, "w1") == (4, 0)
    for o in released:
        job = r.hmget(keys.job_key(MODEL, o.id), J.STATUS, J.ATT)
        assert job == ["queued", "0"]  # requeued, the claim's attempt undone
    # Back at the front of the bulk class, in their order: the next bulk claim takes
    # them first (after the interactive job, which goes before every bulk item).
    nxt = qc.claim(MODEL, "w1")
    assert [j.id for j in nxt.jobs] == [interactive]
    qc.complete(MODEL, [Outcome.ok(interactive, "a")], "w1")
    again = qc.claim(MODEL, "w1")
    assert [j.id for j in again.jobs][:3] == [o.id for o in released]
    assert all(j.attempts == 1 for j in again.jobs)
    qc.complete(MODEL, [Outcome.ok(j.id, "x") for j in again.jobs], "w1")

    def work() -> None:
        b = qc.claim(MODEL, "w1")
        qc.complete(MODEL, [Outcome.ok(j.id, "x") for j in b.jobs], "w1")

    assert finish(c, work) == "finished"
    assert_every_line_once(qc, r, bulk_id)
    counters = qc.stats(MODEL).counters
    assert counters["succeeded"] == LINES + 1
    assert not counters.get("retried") and not counters.get("failed")


def test_a_worker_yields_its_bulk_batch_to_an_interactive_job(
    r: redis.Redis, start_worker: Callable[..., Running]
) -> None:
    """One worker, bulk batches of 4 run one item per call: the first call is held
    until an interactive job is queued, so the worker must give back the other 3,
    run the interactive job next, then every bulk line exactly once."""
    GateHandler.reset()
    cfg = config("tests.kit.yield_handlers:GateHandler")
    qc = client(r, cfg)
    bulk_id = upload(qc, cfg)
    c = Coordinator(qc, cfg, bulk_id)
    assert c._take() == "ok" and c.step() == "more" and bulk_queued(r) == LINES
    run = start_worker(cfg)
    assert GateHandler.entered.wait(10), "the worker never ran a bulk batch"
    (interactive,) = submit(qc, cfg, ["a question"])
    GateHandler.gate.set()

    # The coordinator gathers and feeds, one poll at a time, until the bulk job ends.
    def ended() -> str | None:
        outcome = c.step()
        return None if outcome == "more" else outcome

    assert wait_until(ended, what="the bulk job's end") == "finished"
    assert_every_line_once(qc, r, bulk_id)
    assert qc.get(interactive).status == JobStatus.SUCCEEDED
    # The interactive job ran right after the bulk batch's first item, not after its 4th.
    assert GateHandler.ran[1] == "a question"
    bulk_runs = Counter(x for x in GateHandler.ran if x != "a question")
    assert bulk_runs == Counter(f"line {i}" for i in range(LINES))  # each once: none lost
    reg = run.worker.metrics.registry
    assert reg.get_sample_value("sluice_worker_bulk_items_released_total", {"model": MODEL}) == 3
    counters = qc.stats(MODEL).counters
    assert counters["succeeded"] == LINES + 1 and not counters.get("retried")
