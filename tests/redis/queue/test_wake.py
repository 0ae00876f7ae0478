"""Wake-ups of idle workers: submit (and requeues) push tokens onto the wake list."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import redis

from sluice import keys
from sluice.errors import QueueFull
from sluice.jobs import NewJob, Outcome
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.waits import HUNG_S, blocked_clients, wait_blocked

pytestmark = pytest.mark.redis
Factory = Callable[..., QueueClient]
WAKE = keys.wake_key("m", "32")
LONG_WAIT_S = 50.0  # a wait that ends early proves the wake-up, whatever the machine's speed


def jobs(n: int, **kw: object) -> list[NewJob]:
    return [NewJob({"text": f"t{i}"}, "32", 4, **kw) for i in range(n)]  # type: ignore[arg-type]


def waiter(
    qc: QueueClient, timeout_s: float, buckets: list[str] | None = None
) -> tuple[threading.Thread, dict[str, object]]:
    out: dict[str, object] = {}

    def run() -> None:
        t0 = time.monotonic()
        out["woken"] = qc.wait_for_work("m", timeout_s, buckets)
        out["took_s"] = time.monotonic() - t0

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_a_submit_wakes_a_blocked_waiter_long_before_its_timeout(
    redis_url: str, queue_factory: Factory
) -> None:
    qc = QueueClient(connect(redis_url, timeout_s=3 * LONG_WAIT_S), queue_factory().ops.models)
    before = blocked_clients(qc.redis)
    t, out = waiter(qc, LONG_WAIT_S)
    wait_blocked(qc.redis, before)  # the waiter is in BLPOP: the token must reach it there
    assert "woken" not in out
    qc.submit("m", jobs(1))
    t.join(HUNG_S)
    assert out["woken"] is True  # returned because of the token, not the 50 s timeout
    assert out["took_s"] < LONG_WAIT_S / 2  # type: ignore[operator]
    qc.redis.close()


def test_without_a_token_the_wait_times_out(r: redis.Redis, queue_factory: Factory) -> None:
    qc = queue_factory()
    t0 = time.monotonic()
    assert qc.wait_for_work("m", 0.3) is False
    assert 0.25 < time.monotonic() - t0 < HUNG_S  # waited its timeout out, and did not hang


def test_tokens_are_one_per_new_job_capped_at_64(r: redis.Redis, queue_factory: Factory) -> None:
    qc = queue_factory()
    qc.submit("m", jobs(5))
    assert r.llen(WAKE) == 5
    qc.submit("m", jobs(100))
    assert r.llen(WAKE) == 64
    qc.submit("m", jobs(3))
    assert r.llen(WAKE) == 64
    assert qc.wait_for_work("m", 0.1) is True and r.llen(WAKE) == 63  # one waiter, one token


def test_a_waiter_is_woken_only_by_the_buckets_it_serves(
    redis_url: str, queue_factory: Factory
) -> None:
    qc = QueueClient(connect(redis_url, timeout_s=30), queue_factory().ops.models)
    before = blocked_clients(qc.redis)
    t, out = waiter(qc, 1.0, ["512"])
    wait_blocked(qc.redis, before)
    qc.submit("m", jobs(1))  # bucket 32: its token stays for a worker serving 32
    t.join(HUNG_S)
    assert out["woken"] is False and out["took_s"] > 0.9  # type: ignore[operator]
    assert qc.redis.llen(WAKE) == 1
    qc.redis.close()


def test_an_empty_claim_drops_the_stale_tokens_of_its_buckets(
    r: redis.Redis, queue_factory: Factory
) -> None:
    qc = queue_factory(batching={"max_batch": 8})
    qc.submit("m", jobs(3))
    qc.submit("m", [NewJob({"text": "x"}, "128", 50)])
    assert len(qc.claim("m", "w1", buckets=["32"])) == 3  # a busy worker took them
    assert r.llen(WAKE) == 3  # stale now
    # An idle worker's empty claim drops them; else it would pop 3 stale tokens,
    # one empty claim each.
    assert len(qc.claim("m", "w2", buckets=["32", "512"])) == 0
    assert r.llen(WAKE) == 0
    assert r.llen(keys.wake_key("m", "128")) == 1  # not served by w2: untouched
    assert len(qc.claim("m", "w3")) == 1  # 128's job is still queued
    assert r.llen(keys.wake_key("m", "128")) == 1  # a non-empty claim drops nothing


def test_no_token_for_a_refused_submit_or_an_idempotent_replay(
    r: redis.Redis, queue_factory: Factory
) -> None:
    qc = queue_factory()
    qc.submit("m", jobs(1, idempotency_key="k"))
    assert r.llen(WAKE) == 1
    r.delete(WAKE)
    assert qc.submit("m", jobs(1, idempotency_key="k"))[0].created is False
    with pytest.raises(QueueFull):
        qc.submit("m", jobs(5), max_jobs=3)
    assert r.llen(WAKE) == 0


def test_a_requeue_pushes_a_token(r: redis.Redis, queue_factory: Factory) -> None:
    qc = queue_factory()
    qc.submit("m", jobs(2))
    batch = qc.claim("m", "w1")
    r.delete(WAKE)
    qc.complete("m", [Outcome.release(batch.jobs[0].id)], worker_id="w1")
    assert r.llen(WAKE) == 1  # a given-back job wakes an idle worker
    qc.complete("m", [Outcome.ok(batch.jobs[1].id, [1])], worker_id="w1")
    assert r.llen(WAKE) == 1  # a finished job does not


def test_a_reclaimed_lease_pushes_a_token(r: redis.Redis, queue_factory: Factory) -> None:
    qc = queue_factory(batching={"lease_s": 0.05}, retry={"backoff_ms": 0})  # no backoff
    qc.submit("m", jobs(1))
    qc.claim("m", "w1")
    r.delete(WAKE)
    time.sleep(0.08)
    assert qc.reclaim("m") == 1  # the autoscaler's reaper: no worker claimed meanwhile
    assert r.llen(WAKE) == 1


def test_a_blocked_wait_leaves_the_same_client_free_for_other_calls(
    redis_url: str, queue_factory: Factory
) -> None:
    # The worker's housekeeping thread shares the worker's client: redis-py's pool
    # must give it another connection while the batch loop is blocked in BLPOP.
    qc = QueueClient(connect(redis_url, timeout_s=3 * LONG_WAIT_S), queue_factory().ops.models)
    before = blocked_clients(qc.redis)
    t, out = waiter(qc, LONG_WAIT_S)
    wait_blocked(qc.redis, before)
    assert qc.redis.ping() is True
    qc.stats("m")
    assert "woken" not in out  # answered while the wait still blocks, not after it ended
    qc.submit("m", jobs(1))
    t.join(HUNG_S)
    assert out["woken"] is True
    qc.redis.close()


def test_the_wait_stays_under_the_socket_timeout(redis_url: str, queue_factory: Factory) -> None:
    # A wait longer than the socket timeout would read as a dead connection.
    qc = QueueClient(connect(redis_url, timeout_s=0.4), queue_factory().ops.models)
    t0 = time.monotonic()
    assert qc.wait_for_work("m", LONG_WAIT_S) is False  # no TimeoutError: cut to 0.2 s
    assert time.monotonic() - t0 < LONG_WAIT_S / 2  # did not wait the 50 s asked for
    qc.redis.close()
