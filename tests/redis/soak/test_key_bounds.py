"""Every Redis key family Sluice writes has a TTL or a bound (real Redis).

The audit behind docs/reliability.md ("Load and soak"), one test per family group: a job's
hash and its idempotency key expire once it ends, latency histograms expire
after their hour, the dead-letter list keeps the newest 10,000 ids, a wake
list holds at most 64 tokens, worker keys expire and lapsed workers are pruned.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
import redis

from sluice import keys, registry
from sluice.jobs import NewJob, Outcome
from sluice.queue import QueueClient
from tests.factories import worker_info
from tests.waits import wait_until

pytestmark = pytest.mark.redis

QUEUE = {"result_ttl_s": 30, "dead_letter_ttl_s": 60, "idempotency_ttl_s": 40}
BIG = {"max_batch": 4096, "max_batch_tokens": 4096 * 32, "max_attempts": 1}


def jobs(n: int, **kw: object) -> list[NewJob]:
    return [NewJob(input="x", bucket="32", cost=1, **kw) for _ in range(n)]  # type: ignore[arg-type]


def ttl(r: redis.Redis, key: str) -> int:
    return int(r.ttl(key))


def test_ended_jobs_and_their_keys_expire(queue_factory, r: redis.Redis) -> None:
    q: QueueClient = queue_factory(queue=QUEUE, batching=BIG)
    ok, failed, cancelled = (q.submit("m", jobs(1))[0].id for _ in range(3))
    keyed = q.submit("m", jobs(1, idempotency_key="k-1"))[0].id
    late = q.submit("m", jobs(1, deadline_ms=1))[0].id
    time.sleep(0.01)  # past the 1 ms deadline: the claim marks it expired
    batch = q.claim("m", "w1")
    assert batch.expired == 1 and {j.id for j in batch.jobs} == {ok, failed, cancelled, keyed}
    q.complete(
        "m",
        [Outcome.ok(ok, 1), Outcome.ok(keyed, 2), Outcome.fail(failed, "e", "x")],
        worker_id="w1",
    )
    q.cancel(cancelled)
    for job in (ok, keyed, late, cancelled):
        assert 0 < ttl(r, keys.job_key("m", job)) <= 30, job
    assert 30 < ttl(r, keys.job_key("m", failed)) <= 60  # dead letters are kept longer
    idem = [k for k in r.scan_iter(match=keys.idempotency_prefix("m") + "*")]
    assert len(idem) == 1 and 0 < ttl(r, idem[0]) <= 40
    hists = [
        *r.scan_iter(match=keys.wait_hist_prefix("m") + "*"),
        *r.scan_iter(match=keys.e2e_hist_prefix("m") + "*"),
    ]
    assert len(hists) >= 2 and all(0 < ttl(r, h) <= 3600 for h in hists)
    # Nothing of an ended job is left without a TTL.
    assert all(ttl(r, k) > 0 for k in r.scan_iter(match=keys.job_prefix("m") + "*"))


def test_the_dead_letter_list_keeps_the_newest_ten_thousand(queue_factory, r: redis.Redis) -> None:
    q: QueueClient = queue_factory(queue=QUEUE, batching=BIG)
    total = 10_050
    for _ in range(total // 2000):
        q.submit("m", jobs(2000))
    q.submit("m", jobs(total % 2000))
    failed: list[str] = []
    while batch := q.claim("m", "w1").jobs:
        q.complete("m", [Outcome.fail(j.id, "e", "x") for j in batch], worker_id="w1")
        failed += [j.id for j in batch]
    assert len(failed) == total
    assert r.llen(keys.dead_letter_key("m")) == 10_000
    assert q.dead_letters("m", limit=1) == [failed[-1]]  # newest first; the oldest 50 dropped
    assert q.stats("m").counters["failed"] == total


def test_a_wake_list_holds_at_most_64_tokens(queue_factory, r: redis.Redis) -> None:
    q: QueueClient = queue_factory(batching=BIG)
    for _ in range(5):
        q.submit("m", jobs(100))
    assert r.llen(keys.wake_key("m", "32")) == 64


def _lapsed(q: QueueClient, worker_id: str) -> list[str]:
    """Wait until the registry reads ``worker_id`` as lapsed (Redis server clock)."""

    def stale() -> list[str]:
        found = q.run(registry.list_workers_call("m"))[1]
        return found if worker_id in found else []

    return wait_until(stale, 10, f"{worker_id} to lapse")


def test_worker_keys_expire_and_lapsed_workers_are_pruned(queue_factory, r: redis.Redis) -> None:
    q: QueueClient = queue_factory()
    info = worker_info(started_at=1000.0)
    pipe = r.pipeline(transaction=False)
    for cmd in [*registry.heartbeat(info, 2.0), *registry.send_control("m", "w1")]:
        pipe.execute_command(*cmd)
    pipe.execute()
    assert 0 < r.pttl(keys.worker_key("m", "w1")) <= 2000
    assert 0 < ttl(r, keys.worker_control_key("m", "w1")) <= registry.CONTROL_TTL_S
    # Its last heartbeat, parked (warm pool): lapses in 1 ms.
    for cmd in registry.heartbeat(replace(info, state="standby", parked=True), 0.001):
        r.execute_command(*cmd)
    assert r.zcard(keys.idle_workers_key("m")) == 1
    stale = _lapsed(q, "w1")
    assert q.run(registry.list_workers_call("m"))[0] == []
    for cmd in registry.prune("m", stale):
        r.execute_command(*cmd)
    assert r.hlen(keys.workers_info_key("m")) == 0 and r.zcard(keys.workers_key("m")) == 0
    assert r.zcard(keys.idle_workers_key("m")) == 0


async def test_the_gateway_prunes_lapsed_workers_without_an_autoscaler(redis_url: str) -> None:
    from gateway.metrics import GatewayMetrics
    from gateway.redis_io import RedisGate, connect
    from gateway.snapshots import Snapshots
    from tests.conftest import make_config

    r = connect(redis_url, 2.0)
    try:
        crashed = worker_info(id="crashed", started_at=900.0)
        pipe = r.pipeline(transaction=False)
        for cmd in [
            *registry.heartbeat(crashed, 0.001),  # lapses in 1 ms
            *registry.heartbeat(replace(crashed, id="alive"), 60.0),
        ]:
            pipe.execute_command(*cmd)
        await pipe.execute()
        snaps = Snapshots(r, dict(make_config().models), GatewayMetrics(), RedisGate(2.0, 8))
        deadline = time.monotonic() + 10
        while await r.hlen(keys.workers_info_key("m")) == 2 and time.monotonic() < deadline:
            await snaps.refresh()
        assert await r.hkeys(keys.workers_info_key("m")) == ["alive"]
        assert await r.zrange(keys.workers_key("m"), 0, -1) == ["alive"]
        assert [w.id for w in snaps.current["m"].workers] == ["alive"]
    finally:
        await r.aclose()
