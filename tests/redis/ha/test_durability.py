"""``queue.durability``: with "replica" a submit, a completion, a bulk upload or a
bulk cancel is acknowledged only once a replica holds it (WAIT), else NotReplicated
(503) and a retry with the same Idempotency-Key is safe; with "primary" the primary
alone acknowledges."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis

from sluice import keys
from sluice.bulk.ops import BulkOps, new_bulk_id
from sluice.bulk.ops import scripts as bulk_scripts
from sluice.errors import NotReplicated, RedisUnavailable
from sluice.jobs import JobStatus, NewJob, Outcome
from sluice.local.redis_server import RedisServer
from sluice.queue import AsyncQueueClient, QueueClient
from sluice.queue.client import connect, connect_async
from tests.conftest import make_config
from tests.waits import HUNG_S, wait_until


def _replica_of(primary: RedisServer, port: int | None = None) -> RedisServer:
    args = ["--replicaof", "127.0.0.1", str(primary.port)]
    return RedisServer(port=port, extra_args=args).start()


def _linked(primary: redis.Redis, n: int) -> None:
    def count() -> bool:
        info = primary.info("replication")
        up = [k for k, v in info.items() if k.startswith("slave") and v.get("state") == "online"]
        return len(up) == n

    wait_until(count, HUNG_S, f"{n} replica(s) online")
    if n:
        # Online is the RDB sent, not loaded: wait until the replica acks a write.
        primary.set("sluice:test:probe", 1)
        assert primary.execute_command("WAIT", n, int(HUNG_S * 1000)) >= n


@pytest.fixture
def primary() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def _client(url: str, durability: str) -> QueueClient:
    models = make_config(queue={"durability": durability, "replica_ack_timeout_ms": 200}).models
    return QueueClient(connect(url), dict(models))


def test_a_replica_acked_submit_is_on_the_replica_when_it_returns(primary: RedisServer) -> None:
    q = _client(primary.url, "replica")
    replica = _replica_of(primary)
    try:
        _linked(q.redis, 1)
        [job] = q.submit("m", [NewJob(input="a b c", bucket="32", cost=3, idempotency_key="k1")])
        on_replica = connect(replica.url)
        # Acknowledged means already there: no wait, no retry.
        assert on_replica.exists(f"sluice:{{m}}:job:{job.id}") == 1
        on_replica.close()
    finally:
        replica.stop()
        q.redis.close()


def test_without_a_replica_a_submit_is_refused_and_its_retry_is_safe(primary: RedisServer) -> None:
    q = _client(primary.url, "replica")
    try:
        with pytest.raises(NotReplicated, match="Idempotency-Key"):
            q.submit("m", [NewJob(input="a b c", bucket="32", cost=3, idempotency_key="k2")])
        # The write is on the primary; once a replica is back, the same key gives the
        # same job (created False), not a second one.
        assert q.stats("m").queued == 1
        replica = _replica_of(primary)
        try:
            _linked(q.redis, 1)
            retry = NewJob(input="a b c", bucket="32", cost=3, idempotency_key="k2")
            [again] = q.submit("m", [retry])
            assert again.created is False and q.stats("m").queued == 1
        finally:
            replica.stop()
    finally:
        q.redis.close()


def test_primary_durability_acks_without_a_replica(primary: RedisServer) -> None:
    q = _client(primary.url, "primary")
    try:
        [job] = q.submit("m", [NewJob(input="a b c", bucket="32", cost=3)])
        assert job.created
    finally:
        q.redis.close()


def test_a_completion_retried_after_no_replica_acked_keeps_the_first_result(
    primary: RedisServer,
) -> None:
    q = _client(primary.url, "replica")
    replica = _replica_of(primary)
    try:
        _linked(q.redis, 1)
        [job] = q.submit("m", [NewJob(input="a b c", bucket="32", cost=3)])
        batch = q.claim("m", "w1")
        assert [j.id for j in batch.jobs] == [job.id]
        port = replica.port
        replica.stop()
        _linked(q.redis, 0)
        with pytest.raises(NotReplicated):
            q.complete("m", [Outcome.ok(job.id, {"v": 1}, 1.0)], worker_id="w1")
        replica = _replica_of(primary, port)
        _linked(q.redis, 1)
        # The worker's retry: accepted once, by the first call; the result stays.
        q.complete("m", [Outcome.ok(job.id, {"v": 2}, 1.0)], worker_id="w1")
        rec = q.get(job.id, "m")
        assert rec.status is JobStatus.SUCCEEDED and rec.result == {"v": 1}
    finally:
        replica.stop()
        q.redis.close()


# -- bulk uploads and cancels: the same WAIT, from the model's queue.durability -----


def _bulk_client(url: str, durability: str) -> QueueClient:
    q = _client(url, durability)
    q.register(bulk_scripts())
    return q


def _upload(q: QueueClient) -> str:
    bulk_id = new_bulk_id("m")
    q.run(BulkOps(["m"], 3600).create("m", bulk_id, ['{"input": "a b"}'], None, 0, 60_000))
    return bulk_id


def _state(r: redis.Redis, bulk_id: str) -> str | None:
    return r.hget(keys.bulk_key("m", bulk_id), "state")  # type: ignore[return-value]


def test_a_replica_acked_bulk_upload_and_cancel_are_on_the_replica_when_they_return(
    primary: RedisServer,
) -> None:
    q = _bulk_client(primary.url, "replica")
    replica = _replica_of(primary)
    on_replica = connect(replica.url)
    try:
        _linked(q.redis, 1)
        bulk_id = _upload(q)
        assert _state(on_replica, bulk_id) == "queued"  # no wait, no retry
        assert on_replica.llen(keys.bulk_input_key("m", bulk_id)) == 1
        assert q.run(BulkOps(["m"], 3600).cancel(bulk_id)) == "queued"
        assert _state(on_replica, bulk_id) == "cancelled"
    finally:
        on_replica.close()
        replica.stop()
        q.redis.close()


def test_without_a_replica_a_bulk_upload_and_cancel_are_refused(primary: RedisServer) -> None:
    q = _bulk_client(primary.url, "replica")
    try:
        with pytest.raises(NotReplicated, match="primary alone"):
            _upload(q)
        [bulk_id] = q.redis.zrange(keys.bulk_active_key("m"), 0, -1)
        assert _state(q.redis, bulk_id) == "queued"  # written, not acknowledged
        with pytest.raises(NotReplicated):
            q.run(BulkOps(["m"], 3600).cancel(bulk_id))
        assert _state(q.redis, bulk_id) == "cancelled"
    finally:
        q.redis.close()


def test_primary_durability_acks_a_bulk_upload_without_a_replica(primary: RedisServer) -> None:
    q = _bulk_client(primary.url, "primary")
    try:
        assert _state(q.redis, _upload(q)) == "queued"
    finally:
        q.redis.close()


def test_a_replayed_submit_on_a_demoted_primary_asks_again_where_the_primary_is(
    primary: RedisServer,
) -> None:
    """After a failover the old primary comes back as a replica; a connection still on
    it replays a keyed submit without writing, so only WAIT refuses ("used with replica
    instances"): that is RedisUnavailable (a 503 to retry), with the client's
    connections dropped so that new ones ask Sentinel again, not an error for ever."""
    q = _client(primary.url, "replica")
    replica = _replica_of(primary)
    try:
        _linked(q.redis, 1)
        job = NewJob(input="a b c", bucket="32", cost=3, idempotency_key="k3")
        [made] = q.submit("m", [job])
        on_replica = _client(replica.url, "replica")
        on_replica.redis.ping()
        conns = on_replica.redis.connection_pool._available_connections
        assert [c._sock is not None for c in conns] == [True]
        with pytest.raises(RedisUnavailable, match="replica now"):
            on_replica.submit("m", [job])  # run: the durable pipeline
        assert all(c._sock is None for c in conns)  # dropped: the next connects afresh
        with pytest.raises(RedisUnavailable, match="replica now"):
            on_replica.run_all([on_replica.ops.submit("m", [job])])
        models = make_config(queue={"durability": "replica"}).models

        async def replayed_async() -> None:
            aq = AsyncQueueClient(connect_async(replica.url), dict(models))
            try:
                with pytest.raises(RedisUnavailable, match="replica now"):
                    await aq.run_all([aq.ops.submit("m", [job])])
                with pytest.raises(RedisUnavailable, match="replica now"):
                    await aq.submit("m", [job])
            finally:
                await aq.redis.aclose()

        asyncio.run(replayed_async())
        [again] = q.submit("m", [job])  # the primary itself still answers the replay
        assert again.id == made.id and again.created is False
        on_replica.redis.close()
    finally:
        replica.stop()
        q.redis.close()
