"""The coordinator on a real Redis: window, order, per-line errors, crashes, cancel.

A fake worker (claim + complete through the real scripts) stands in for model
workers; slices are driven step by step, so every interleaving here is exact.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import redis

from bulkworker.coordinator import Coordinator
from sluice import keys
from sluice.bulk.ops import BulkOps, scripts
from sluice.config import SluiceConfig
from sluice.jobs import Outcome
from sluice.queue import QueueClient
from tests.kit.bulk import MODEL, config, upload

pytestmark = pytest.mark.redis


@pytest.fixture
def cfg() -> SluiceConfig:
    return config()


@pytest.fixture
def q(r: redis.Redis, cfg: SluiceConfig) -> Iterator[QueueClient]:
    client = QueueClient(r, dict(cfg.models))
    client.register(scripts())
    yield client


def good(i: int) -> str:
    return json.dumps({"input": f"text {i}", "custom_id": f"c{i}"})


def work(q: QueueClient, max_batches: int = 100) -> int:
    """Claim and complete like a worker: result = the input upper-cased."""
    n = 0
    for _ in range(max_batches):
        batch = q.claim(MODEL, "w1")
        if not batch.jobs:
            break
        q.complete(MODEL, [Outcome.ok(j.id, j.input.upper()) for j in batch.jobs], "w1")
        n += len(batch.jobs)
    return n


def bulk_queued(r: redis.Redis) -> int:
    return sum(r.zcount(keys.queue_key(MODEL, b), 3e12, "+inf") for b in ("8", "64"))


def output(r: redis.Redis, bulk_id: str, total: int) -> list[dict[str, object]]:
    raw = r.hmget(keys.bulk_output_key(MODEL, bulk_id), list(range(total)))
    return [json.loads(x) for x in raw if x is not None]


def run_to_end(c: Coordinator, q: QueueClient, r: redis.Redis, steps: int = 500) -> str:
    assert c._take() == "ok"  # taken already, or now
    for _ in range(steps):
        outcome = c.step()
        assert bulk_queued(r) <= 6, "the window is bounded"
        if outcome != "more":
            return outcome
        work(q, max_batches=1)
    raise AssertionError("the bulk job did not finish")


def test_every_line_once_in_order_with_bad_lines_failing_alone(
    r: redis.Redis, q: QueueClient, cfg: SluiceConfig
) -> None:
    lines = [good(i) for i in range(40)]
    lines[3] = "{not json"
    lines[7] = json.dumps({"custom_id": "no-input"})
    lines[9] = json.dumps({"input": " ".join(["w"] * 100), "custom_id": "big"})  # > 64 words
    lines[12] = ""
    bulk_id = upload(q, cfg, lines)
    assert run_to_end(Coordinator(q, cfg, bulk_id), q, r) == "finished"
    out = output(r, bulk_id, 40)
    assert [o["line"] for o in out] == list(range(1, 41))
    bad = {o["line"]: o["error"]["type"] for o in out if o["status"] != "succeeded"}  # type: ignore[index]
    assert bad == {
        4: "invalid_input",
        8: "invalid_input",
        10: "input_too_large",
        13: "invalid_input",
    }
    assert out[0] == {
        "line": 1,
        "custom_id": "c0",
        "status": "succeeded",
        "result": "TEXT 0",
        "error": None,
    }
    assert out[9]["custom_id"] == "big"
    state = q.run(BulkOps([MODEL], 60).get(bulk_id))
    assert (state.state, state.succeeded, state.failed) == ("completed", 36, 4)
    # Nothing left behind: no pending, the active set and backlog forget it, the
    # succeeded jobs' hashes are gone (their results live in the output).
    assert not r.exists(keys.bulk_pending_key(MODEL, bulk_id))
    assert r.zcard(keys.bulk_active_key(MODEL)) == 0
    assert not r.hexists(keys.bulk_backlog_key(MODEL), bulk_id)
    assert not r.keys(keys.job_prefix(MODEL) + "*")
    assert q.stats(MODEL).counters["succeeded"] == 36


def test_a_killed_coordinator_loses_and_duplicates_nothing(
    r: redis.Redis, q: QueueClient, cfg: SluiceConfig
) -> None:
    bulk_id = upload(q, cfg, [good(i) for i in range(30)])
    first = Coordinator(q, cfg, bulk_id)
    assert first._take() == "ok"
    for _ in range(4):
        first.step()
        work(q, max_batches=1)
    # Killed mid-run: it never runs again. A new coordinator is refused until the
    # lease lapses, then takes over from the checkpoint.
    second = Coordinator(q, cfg, bulk_id, clock=time.monotonic)
    status, _ = q.run(second.ops.lease(bulk_id, second.token, second.lease_ms, "take"))
    assert status == "held"
    time.sleep(cfg.bulk.lease_s + 0.05)
    assert second._take() == "ok"
    assert first.step() == "lost"  # the old one, were it only paused, changes nothing
    assert run_to_end(second, q, r) == "finished"
    out = output(r, bulk_id, 30)
    assert [o["custom_id"] for o in out] == [f"c{i}" for i in range(30)]
    assert q.stats(MODEL).counters["succeeded"] == 30  # no line ran twice


def test_a_crash_between_checkpoint_and_submit_resubmits_the_same_jobs(
    r: redis.Redis, q: QueueClient, cfg: SluiceConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    bulk_id = upload(q, cfg, [good(i) for i in range(12)])
    c = Coordinator(q, cfg, bulk_id)
    assert c._take() == "ok"
    real = c._submit
    monkeypatch.setattr(c, "_submit", lambda jobs: True)  # checkpointed, never submitted
    c.step()
    assert r.hlen(keys.bulk_pending_key(MODEL, bulk_id)) == 5 and bulk_queued(r) == 0
    monkeypatch.setattr(c, "_submit", real)
    assert run_to_end(c, q, r) == "finished"
    assert len(output(r, bulk_id, 12)) == 12
    assert q.stats(MODEL).counters["succeeded"] == 12


def test_a_coordinator_paused_between_checkpoint_and_submit_recreates_nothing(
    r: redis.Redis, q: QueueClient, cfg: SluiceConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Paused (SIGSTOP) after its checkpoint, woken after another coordinator fed,
    ran and gathered those lines: its late submit is refused by the lease fence.
    Unfenced it recreated the gathered jobs (their hashes are deleted on gather),
    and they ran a second time (seen in CI: 8,064 completions for 8,000 lines)."""
    bulk_id = upload(q, cfg, [good(i) for i in range(12)])
    first = Coordinator(q, cfg, bulk_id)
    assert first._take() == "ok"
    real = first._submit
    paused: list[list[object]] = []
    monkeypatch.setattr(first, "_submit", lambda jobs: paused.append(jobs) or True)
    first.step()  # checkpointed 5 lines; "paused" before their submit
    assert len(paused) == 1 and len(paused[0]) == 5 and bulk_queued(r) == 0
    time.sleep(cfg.bulk.lease_s + 0.05)  # the lease lapses while it is paused
    second = Coordinator(q, cfg, bulk_id, clock=time.monotonic)
    assert run_to_end(second, q, r) == "finished"
    assert q.stats(MODEL).counters["succeeded"] == 12
    assert real(paused[0]) is False  # it wakes and submits what it had in hand
    assert bulk_queued(r) == 0 and work(q) == 0  # nothing recreated, nothing runs again
    assert q.stats(MODEL).counters["succeeded"] == 12


def test_cancel_stops_feeding_and_marks_the_rest(
    r: redis.Redis, q: QueueClient, cfg: SluiceConfig
) -> None:
    ops = BulkOps([MODEL], cfg.bulk.ttl_s)
    bulk_id = upload(q, cfg, [good(i) for i in range(50)])
    c = Coordinator(q, cfg, bulk_id)
    assert c._take() == "ok"
    for _ in range(3):
        c.step()
        work(q, max_batches=1)
    # One batch ends between the cancel and the coordinator's next poll: its lines
    # keep their results (they are not marked cancelled).
    assert q.run(ops.cancel(bulk_id)) == "running"
    late = work(q, max_batches=1)
    assert late > 0
    assert q.run(ops.get(bulk_id)).state == "cancelling"
    fed = q.run(ops.get(bulk_id)).cursor
    assert c.step() == "finished"
    state = q.run(ops.get(bulk_id))
    assert state.state == "cancelled" and state.cursor == fed < 50
    assert bulk_queued(r) == 0  # its queued items were cancelled
    assert work(q) == 0
    done = output(r, bulk_id, 50)
    assert state.succeeded == len(done) == 4 * 3 + late  # 3 batches of 4, then the late one
    assert all(o["status"] == "succeeded" for o in done)


def test_cancel_before_any_coordinator_ends_it_at_once(q: QueueClient, cfg: SluiceConfig) -> None:
    ops = BulkOps([MODEL], cfg.bulk.ttl_s)
    bulk_id = upload(q, cfg, [good(0)], owner="team-a")
    with pytest.raises(Exception, match="not found"):
        q.run(ops.cancel(bulk_id, "team-b"))  # another key's bulk job is not found
    assert q.run(ops.cancel(bulk_id, "team-a")) == "queued"
    assert q.run(ops.get(bulk_id)).state == "cancelled"
    assert Coordinator(q, cfg, bulk_id).run_slice() == "ended"
    with pytest.raises(Exception, match="already cancelled"):
        q.run(ops.cancel(bulk_id))


def test_a_slice_ends_and_releases_its_lease(q: QueueClient, r: redis.Redis) -> None:
    cfg = config(slice_s=0.05)
    bulk_id = upload(q, cfg, [good(i) for i in range(100)])
    assert Coordinator(q, cfg, bulk_id).run_slice() == "slice"
    assert r.hget(keys.bulk_key(MODEL, bulk_id), "token") == ""
    # The next slice takes it at once (the lease was given back, not left to lapse).
    status, state = q.run(BulkOps([MODEL], 60).lease(bulk_id, "t2", 500, "take"))
    assert (status, state) == ("ok", "running")


def test_only_the_slice_the_bulk_job_names_may_take_it(q: QueueClient, cfg: SluiceConfig) -> None:
    ops = BulkOps([MODEL], cfg.bulk.ttl_s)
    bulk_id = upload(q, cfg, [good(0)])
    q.run(ops.set_fields(bulk_id, rq_job="slice-2"))
    assert q.run(ops.lease(bulk_id, "t1", 500, "take", "slice-1"))[0] == "superseded"
    assert q.run(ops.lease(bulk_id, "t2", 500, "take", "slice-2"))[0] == "ok"


def test_the_backlog_report_counts_unfed_lines(
    r: redis.Redis, q: QueueClient, cfg: SluiceConfig
) -> None:
    bulk_id = upload(q, cfg, [good(i) for i in range(40)])
    c = Coordinator(q, cfg, bulk_id)
    assert c._take() == "ok"
    c.step()  # feeds 5 (feed_chunk) of 40, each "text N" = 2 words
    c.step()
    report = json.loads(r.hget(keys.bulk_backlog_key(MODEL), bulk_id))
    assert report["queued"] == 6  # the window is full
    assert report["queued_cost"] == 12
    assert report["backlog_cost"] == 80  # 40 lines x 2: nothing has run yet
