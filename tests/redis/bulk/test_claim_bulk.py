"""Bulk items (rank 3) in the claim and submit scripts, on a real Redis (ADR 0090)."""

from __future__ import annotations

import time

import pytest
import redis

from sluice import keys
from sluice.jobs import BULK, NewJob
from sluice.queue import QueueClient
from tests.conftest import make_config
from tests.factories import worker_info

pytestmark = pytest.mark.redis


def job(bucket: str, priority: str, cost: int = 10, jid: str = "") -> NewJob:
    return NewJob(input="x", bucket=bucket, cost=cost, priority=priority, id=jid)


def client(r: redis.Redis, **overrides: object) -> QueueClient:
    return QueueClient(r, dict(make_config(**overrides).models))


def test_an_old_bulk_head_never_beats_a_fresh_interactive_one(r: redis.Redis) -> None:
    q = client(r)
    q.submit("m", [job("512", BULK, 400)])
    # Make the bulk head look very old: HRRN alone would pick it (and so would the
    # overdue rule, at 20 x its service time).
    old_ms = int(time.time() * 1000) - 600_000
    r.hset(keys.job_key("m", _only_id(r)), "enq", old_ms)
    q.submit("m", [job("32", "low", 5)])
    batch = q.claim("m", "w1")
    assert batch.bucket == "32" and len(batch) == 1
    batch = q.claim("m", "w1")
    assert batch.bucket == "512" and len(batch) == 1  # then the bulk item, once alone


def _only_id(r: redis.Redis) -> str:
    (jid,) = r.zrange(keys.queue_key("m", "512"), 0, -1)
    return str(jid)


def test_an_interactive_batch_takes_no_bulk_item(r: redis.Redis) -> None:
    q = client(r)
    q.submit("m", [job("32", BULK) for _ in range(5)])
    q.submit("m", [job("32", "normal") for _ in range(2)])
    first = q.claim("m", "w1")
    assert len(first) == 2  # the two interactive jobs, not topped up with bulk items
    second = q.claim("m", "w1")
    assert len(second) == 5


def test_an_all_bulk_batch_has_the_bulk_limits(r: redis.Redis) -> None:
    q = client(r, bulk={"max_batch": 3})
    q.submit("m", [job("32", BULK) for _ in range(7)])
    assert [len(q.claim("m", "w1")) for _ in range(4)] == [3, 3, 1, 0]
    # An interactive batch keeps the model's own max_batch (32).
    q.submit("m", [job("32", "normal") for _ in range(7)])
    assert len(q.claim("m", "w1")) == 7


def test_a_worker_lowered_budget_also_binds_bulk_batches(r: redis.Redis) -> None:
    q = client(r, bulk={"max_batch": 10})
    q.submit("m", [job("32", BULK) for _ in range(6)])
    assert len(q.claim("m", "w1", max_batch=2)) == 2


def test_bulk_waits_stay_out_of_the_wait_histogram(r: redis.Redis) -> None:
    q = client(r)
    q.submit("m", [job("32", BULK) for _ in range(4)])
    assert len(q.claim("m", "w1")) == 4
    assert not r.keys(keys.wait_hist_prefix("m") + "*")
    q.submit("m", [job("32", "normal")])
    assert len(q.claim("m", "w1")) == 1
    (hkey,) = r.keys(keys.wait_hist_prefix("m") + "*")
    assert r.hget(hkey, "count") == "1"


def test_submit_counts_bulk_arrivals_apart(r: redis.Redis) -> None:
    q = client(r)
    q.submit("m", [job("32", BULK, 7), job("32", BULK, 5), job("32", "low", 3)])
    stats = q.stats("m").counters
    assert stats["arrived_cost"] == 15
    assert stats["bulk_arrived_cost"] == 12
    # The same ids again (a coordinator resubmitting after a crash): counted once.
    ids = [s.id for s in q.submit("m", [job("32", BULK, 7, "m.bulkx-1")])]
    q.submit("m", [job("32", BULK, 7, ids[0])])
    assert q.stats("m").counters["bulk_arrived_cost"] == 19


def test_a_bulk_item_reads_back_as_bulk(r: redis.Redis) -> None:
    q = client(r)
    (sub,) = q.submit("m", [job("32", BULK)])
    assert q.get(sub.id).priority == "bulk"


def test_a_prefetch_claim_takes_no_bulk_batch(r: redis.Redis) -> None:
    q = client(r)
    q.submit("m", [job("32", BULK, jid=f"m.bulk1-{i}") for i in range(3)])  # item ids
    assert len(q.claim("m", "w1", bulk=False)) == 0
    assert r.zcard(keys.queue_key("m", "32")) == 3  # left for a worker that is free
    q.submit("m", [job("32", "normal")])
    interactive = q.claim("m", "w1", bulk=False)
    assert len(interactive) == 1 and not interactive.bulk
    batch = q.claim("m", "w1")
    assert len(batch) == 3 and batch.bulk


def register(
    r: redis.Redis, *worker_ids: str, parked: bool = False, state: str | None = None
) -> None:
    from sluice import registry

    now = time.time()
    for wid in worker_ids:
        info = worker_info(
            id=wid,
            buckets=[],
            state=state or ("standby" if parked else "ready"),
            started_at=now,
            parked=parked,
        )
        for cmd in registry.heartbeat(info, 30):
            r.execute_command(*cmd)


def test_reserve_workers_keeps_a_worker_free_of_bulk(r: redis.Redis) -> None:
    q = client(r, bulk={"reserve_workers": 1, "max_batch": 2})
    register(r, "w1", "w2", "w3")
    q.submit("m", [job("32", BULK, jid=f"m.bulk1-{i}") for i in range(10)])
    assert len(q.claim("m", "w1")) == 2
    assert len(q.claim("m", "w2")) == 2  # 3 live, 2 holders: w3 is still free
    assert len(q.claim("m", "w3")) == 0  # it would leave no free worker
    q.submit("m", [job("32", "normal")])
    assert len(q.claim("m", "w3")) == 1  # interactive work is never held back
    batch = q.claim("m", "w1")  # w1 still holds its bulk batch: one more is no new holder
    assert len(batch) == 2
    # w2 finishes its batch: w3 may now take bulk items.
    q.complete("m", [], "w2")
    assert len(q.claim("m", "w3")) == 2


def test_a_parked_worker_is_not_counted_free_for_the_reserve(r: redis.Redis) -> None:
    # One serving worker and one parked (warm-pool) worker: the parked one serves
    # nothing until promoted, so it cannot be the worker kept free for interactive
    # jobs (issue 28, item 4).
    q = client(r, bulk={"reserve_workers": 1, "max_batch": 8})
    register(r, "w1")
    register(r, "p1", parked=True)
    q.submit("m", [job("32", BULK, jid=f"m.bulk1-{i}") for i in range(8)])
    assert len(q.claim("m", "w1")) == 0
    # Promoted: its next heartbeat says it serves, and it now counts as free.
    register(r, "p1")
    assert len(q.claim("m", "w1")) == 8
    # Parked again (a scale-down): it stops counting at its next heartbeat.
    q.complete("m", [], "w1")
    register(r, "p1", parked=True)
    assert len(q.claim("m", "w1")) == 0


@pytest.mark.parametrize("state", ["starting", "draining", "quarantined"])
def test_a_worker_that_claims_nothing_is_not_counted_free(r: redis.Redis, state: str) -> None:
    # Like a parked worker, one still loading, draining or quarantined takes no
    # interactive job: it cannot be the worker the reserve keeps free.
    q = client(r, bulk={"reserve_workers": 1, "max_batch": 8})
    register(r, "w1")
    register(r, "x1", state=state)
    q.submit("m", [job("32", BULK, jid=f"m.bulk1-{i}") for i in range(8)])
    assert len(q.claim("m", "w1")) == 0
    register(r, "x1")  # ready now: it counts as free from this heartbeat
    assert len(q.claim("m", "w1")) == 8


def test_a_dead_holder_stops_counting_when_its_lease_lapses(r: redis.Redis) -> None:
    q = client(r, bulk={"reserve_workers": 1}, batching={"lease_s": 0.2})
    register(r, "w1", "w2")
    q.submit("m", [job("32", BULK, jid=f"m.bulk1-{i}") for i in range(3)])
    assert len(q.claim("m", "w1", max_batch=1)) == 1  # then w1 dies holding it
    assert len(q.claim("m", "w2", max_batch=1)) == 0
    time.sleep(0.25)
    assert len(q.claim("m", "w2", max_batch=1)) == 1


def test_a_claim_that_holds_bulk_back_keeps_the_wake_tokens(r: redis.Redis) -> None:
    q = client(r)
    q.submit("m", [job("32", BULK, jid=f"m.bulk1-{i}") for i in range(2)])
    assert r.llen(keys.wake_key("m", "32")) == 2
    assert len(q.claim("m", "w1", bulk=False)) == 0
    assert r.llen(keys.wake_key("m", "32")) == 2  # another worker may take them
    assert len(q.claim("m", "w2")) == 2
    assert len(q.claim("m", "w2")) == 0
    assert r.llen(keys.wake_key("m", "32")) == 0  # empty now: the stale tokens go


def test_idle_reserve_counts_workers_holding_any_batch(r: redis.Redis) -> None:
    # bulk.idle_reserve (ADR 0164): bulk only while another serving worker holds no
    # batch at all. A worker running interactive jobs is not idle, unlike under
    # reserve_workers, which counts only bulk holders.
    q = client(r, bulk={"idle_reserve": 1, "max_batch": 2})
    register(r, "w1", "w2", "w3")
    q.submit("m", [job("32", BULK, jid=f"m.bulk1-{i}") for i in range(10)])
    assert len(q.claim("m", "w1")) == 2  # w2, w3 idle
    q.submit("m", [job("32", "normal")])
    assert len(q.claim("m", "w2")) == 1  # interactive work is never held back
    # (From this interactive claim on, for 10-20 s, the reserve applies.)
    assert len(q.claim("m", "w3")) == 0  # w1 in bulk, w2 in an interactive batch
    # w2's prefetch beside its batch finds nothing: it still holds the batch it runs.
    assert len(q.claim("m", "w2", bulk=False)) == 0
    assert len(q.claim("m", "w3")) == 0
    # A worker counts as holding its batch until its next claim finds nothing.
    q.complete("m", [], "w2")
    assert len(q.claim("m", "w3")) == 0
    assert len(q.claim("m", "w2")) == 2  # w3 is idle (its claims found nothing)
    assert r.zrange(keys.busy_workers_key("m"), 0, -1) == ["w1", "w2"]


def test_idle_reserve_keeps_no_books_when_off(r: redis.Redis) -> None:
    q = client(r, bulk={"max_batch": 2})
    register(r, "w1", "w2")
    q.submit("m", [job("32", BULK, jid=f"m.bulk1-{i}") for i in range(4)])
    assert len(q.claim("m", "w1")) == 2 and len(q.claim("m", "w2")) == 2
    assert not r.exists(keys.busy_workers_key("m"))


def test_idle_reserve_never_starves_a_lone_worker(r: redis.Redis) -> None:
    # No other serving worker to keep idle (a parked one does not count): the
    # reserve is capped at zero, and bulk runs.
    q = client(r, bulk={"idle_reserve": 2, "max_batch": 2})
    register(r, "w1")
    register(r, "p1", parked=True)
    q.submit("m", [job("32", BULK, jid=f"m.bulk1-{i}") for i in range(4)])
    assert len(q.claim("m", "w1")) == 2


def test_idle_reserve_lifts_without_interactive_traffic(r: redis.Redis) -> None:
    # No interactive job claimed in this wait window or the last: nothing to keep a
    # worker idle for, so bulk fills the fleet; the first interactive claim ends it.
    q = client(r, bulk={"idle_reserve": 1, "max_batch": 2})
    register(r, "w1", "w2")
    q.submit("m", [job("32", BULK, jid=f"m.bulk1-{i}") for i in range(8)])
    assert len(q.claim("m", "w1")) == 2 and len(q.claim("m", "w2")) == 2
    q.submit("m", [job("32", "normal")])
    assert len(q.claim("m", "w1")) == 1
    assert len(q.claim("m", "w2")) == 0  # w1 holds a batch: the reserve is back
