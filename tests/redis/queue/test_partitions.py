"""queue.partitions on a real server (docs/adr/0159): the protocol's key paths with a
model spread over 3 partitions (on a 3-shard Cluster in ``make test-cluster``, where
model ``m``'s three tags sit on three shards)."""

from __future__ import annotations

from typing import Any

import pytest

from sluice import keys
from sluice.admin import ops as admin
from sluice.admin.ops import drive
from sluice.admin.ops import scripts as admin_scripts
from sluice.errors import JobNotFound, QueueFull
from sluice.jobs import JobStatus, NewJob, Outcome, Owner, Webhook
from sluice.queue import QueueClient
from sluice.webhooks.ops import WebhookOps
from sluice.webhooks.ops import scripts as webhook_scripts
from tests.waits import redis_now_ms, wait_until

pytestmark = pytest.mark.redis
N = 3


def job(i: int, **kw: Any) -> NewJob:
    return NewJob(input=f"text {i}", bucket="32", cost=4, **kw)


@pytest.fixture
def q(queue_factory: Any) -> QueueClient:
    return queue_factory(queue={"partitions": N})


def test_submits_spread_and_a_worker_drains_every_partition(q: QueueClient) -> None:
    subs = [q.submit("m", [job(i)])[0] for i in range(30)]
    assert {keys.partition_of(s.id) for s in subs} == {0, 1, 2}
    counts = [q.redis.zcard(keys.queue_key("m", "32", p)) for p in range(N)]
    assert counts == [10, 10, 10]  # round-robin: an even spread
    assert q.stats("m").queued == 30  # the readers sum the partitions
    seen: list[str] = []
    while batch := q.claim("m", "w1", max_batch=4):  # one worker, never idle while any has work
        assert len({keys.partition_of(j.id) for j in batch.jobs}) == 1
        q.complete("m", [Outcome.ok(j.id, j.input) for j in batch.jobs], "w1")
        seen += [j.id for j in batch.jobs]
    assert sorted(seen) == sorted(s.id for s in subs)
    for s in subs:  # GET finds each job in its partition
        rec = q.get(s.id, "m")
        assert rec.status is JobStatus.SUCCEEDED and rec.result.startswith("text")
    stats = q.stats("m")
    assert stats.queued == 0 and stats.in_flight == 0 and stats.counters["succeeded"] == 30


def test_cancel_renew_reclaim_and_dead_letters_in_other_partitions(queue_factory: Any) -> None:
    q = queue_factory(queue={"partitions": N}, batching={"lease_s": 0.05, "max_attempts": 1})
    subs = [q.submit("m", [job(i)])[0] for i in range(6)]
    assert q.cancel(subs[1].id) == "queued"  # partition 1
    assert q.get(subs[1].id).status is JobStatus.CANCELLED
    held = [j.id for b in (q.claim("m", "w1"), q.claim("m", "w1")) for j in b.jobs]
    assert len({keys.partition_of(i) for i in held}) == 2
    assert q.renew("m", "w1", held) == []  # one call per partition, nothing lost
    n = len(held)
    wait_until(lambda: q.reclaim("m") >= 0 and _dead(q) == n, 10, "the lapsed leases reclaimed")
    assert sorted(q.dead_letters("m")) == sorted(held)  # leases lapsed, max_attempts 1


def _dead(q: QueueClient) -> int:
    return q.stats("m").dead_lettered


def test_an_idempotency_key_replays_in_its_partition(q: QueueClient) -> None:
    first = [q.submit("m", [job(0, idempotency_key=f"k{i}")])[0] for i in range(6)]
    again = [q.submit("m", [job(0, idempotency_key=f"k{i}")])[0] for i in range(6)]
    assert [s.id for s in first] == [s.id for s in again]
    assert all(s.created for s in first) and not any(s.created for s in again)
    assert len({keys.partition_of(s.id) for s in first}) > 1
    assert q.stats("m").queued == 6


@pytest.mark.parametrize(("before", "after"), [(1, 3), (3, 2), (3, 1)])
def test_an_idempotency_key_replays_after_the_count_changed(
    queue_factory: Any, before: int, after: int
) -> None:
    old, new = (queue_factory(queue={"partitions": n}) for n in (before, after))
    old.refresh_partitions()  # what a client of the old count does every 30 s
    owner = Owner("a")
    keyed = [job(i, idempotency_key=f"k{i}") for i in range(12)]
    first = [old.submit("m", [j], owner=owner)[0] for j in keyed]
    new.refresh_partitions()  # the new count's client reads the old count's record
    again = [new.submit("m", [j], owner=owner)[0] for j in keyed]
    assert [s.id for s in again] == [s.id for s in first]  # the original jobs
    assert all(s.created for s in first) and not any(s.created for s in again)
    now_at = [new.ops.parts.for_submit("m", [j], "a", False) for j in keyed]
    assert now_at != [keys.partition_of(s.id) for s in first]  # some keys hash elsewhere now
    assert new.stats("m").queued == 12
    fresh = job(0, idempotency_key="new")
    made = new.submit("m", [fresh], owner=owner)[0]  # a new key: where the new count says
    assert made.created and keys.partition_of(made.id) == new.ops.parts.for_submit(
        "m", [fresh], "a", False
    )


def test_an_owner_limit_holds_per_partition_share(q: QueueClient) -> None:
    owner = Owner("alice", max_unfinished=6)
    for i in range(6):
        q.submit("m", [job(i)], owner=owner)
    with pytest.raises(QueueFull):  # each partition holds its share: 2 of 6
        q.submit("m", [job(9)], owner=owner)
    assert q.stats("m").queued == 6


def test_the_queue_limit_holds_per_partition_share(q: QueueClient) -> None:
    for i in range(3):
        q.submit("m", [job(i)], max_jobs=3)
    with pytest.raises(QueueFull):  # 3 queued in all: ceil(3 / 3) = 1 each
        q.submit("m", [job(9)], max_jobs=3)


def test_lowering_partitions_keeps_draining_the_old_ones(queue_factory: Any) -> None:
    wide = queue_factory(queue={"partitions": N})
    subs = [wide.submit("m", [job(i)])[0] for i in range(9)]
    wide.claim("m", "w0", max_batch=1)  # a claim records the high-water (3)
    narrow = queue_factory()  # queue.partitions back to 1
    new = narrow.submit("m", [job(99)])[0]
    assert keys.partition_of(new.id) == 0
    assert narrow.stats("m").queued == 9  # 8 old + the new one; one is running
    ids = []
    while batch := narrow.claim("m", "w1"):
        ids += [j.id for j in batch.jobs]
    assert len(ids) == 9 and new.id in ids
    assert all(narrow.get(s.id).status is not JobStatus.QUEUED for s in subs)


def test_an_id_without_a_partition_mark_is_partition_zero(q: QueueClient) -> None:
    assert keys.partition_of("m.018c2f3a9b1d2e3f4a5b6c7d8e9f") == 0
    assert keys.job_key("m", "m.2~abc") == "sluice:{m~2}:job:m.2~abc"
    with pytest.raises(JobNotFound):
        q.get("m.1~0000")


def test_webhook_deliveries_are_claimed_and_done_in_each_partition(q: QueueClient) -> None:
    q.register(webhook_scripts())
    ops = WebhookOps(["m"], {"m": N})
    hook = Webhook("http://receiver.invalid/hook")
    ids = [q.submit("m", [job(i, webhook=hook)])[0].id for i in range(3)]
    while batch := q.claim("m", "w1"):
        q.complete("m", [Outcome.ok(j.id, 1) for j in batch.jobs], "w1")
    assert q.run(ops.backlog("m", redis_now_ms(q.redis) + 1)).pending == 3
    claimed = []
    for p in range(N):
        got = q.run(ops.claim_batch("m", "n1", 60_000, 10, partition=p)).claimed
        assert [keys.partition_of(c.id) for c in got] == [p]
        claimed += got
    assert sorted(c.id for c in claimed) == sorted(ids)
    for c in claimed:
        assert q.run(ops.done(c, "delivered", status=200))
    assert q.run(ops.backlog("m", redis_now_ms(q.redis) + 1)).pending == 0


def test_dead_letters_are_paged_redriven_and_queues_purged_over_partitions(
    queue_factory: Any,
) -> None:
    q = queue_factory(queue={"partitions": N}, batching={"max_attempts": 1})
    q.register(admin_scripts())
    subs = [q.submit("m", [job(i)])[0] for i in range(6)]
    while batch := q.claim("m", "w1"):
        q.complete("m", [Outcome.fail(j.id, "x", "boom") for j in batch.jobs], "w1")
    seen, cursor = [], None
    while True:
        pg = drive(admin.page("m", 4, cursor, N), q.run)
        seen += [d.id for d in pg.items]
        assert pg.total == 6
        if not (cursor := pg.next_cursor):
            break
    assert sorted(seen) == sorted(s.id for s in subs)
    ids = drive(admin.select("m", None, N), q.run)
    assert sorted(drive(admin.act("m", "redrive", ids), q.run)) == sorted(ids)
    assert q.stats("m").queued == 6 and q.stats("m").dead_lettered == 0
    assert drive(admin.purge_queue("m", q.ops.model("m"), span=N), q.run) == 6
    assert all(q.get(s.id).status is JobStatus.CANCELLED for s in subs)
