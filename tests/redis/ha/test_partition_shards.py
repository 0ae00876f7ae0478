"""A hot model over the three shards of a real Redis Cluster (queue.partitions: 3,
docs/adr/0159): each shard's own command counts show the spread, a partition's
slot moved while submits and claims run loses and repeats nothing, and a shard's
primary killed under load fails over to its replica without losing what it had
replicated, while the other partitions keep serving."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.crc import key_slot

from sluice import keys
from sluice.config import parse_config
from sluice.errors import RedisUnavailable
from sluice.jobs import JobStatus, NewJob, Outcome
from sluice.local.redis_server import RedisServer
from sluice.local.redis_topology import LocalCluster
from sluice.local.redis_topology import _cluster_port as cluster_port
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.kit.queue_load import Load, every_job_ran_once, move_slot_under_load
from tests.waits import HUNG_S, wait_until

pytestmark = [pytest.mark.system]
MODEL = "m"  # its tags {m}, {m~1}, {m~2} hash to slots on three different shards
N = 3
MODELS = dict(
    parse_config(
        {"models": {MODEL: {"handler": "synthetic", "buckets": [32], "queue": {"partitions": N}}}}
    ).models
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3) as c:
        yield c


def _slot(p: int) -> int:
    return key_slot(keys.stats_key(MODEL, p).encode())


def _script_calls(node: redis.Redis) -> int:
    stats = node.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))


def test_a_hot_model_spreads_over_the_three_shards(cluster: LocalCluster) -> None:
    owners = {cluster.owner(_slot(p)).port for p in range(N)}
    assert len(owners) == N  # the premise: three partitions, three shards
    nodes = [cluster.client(n) for n in cluster.nodes]
    before = [_script_calls(n) for n in nodes]
    q = QueueClient(connect(cluster.url), MODELS)
    try:
        subs = [s for i in range(60) for s in q.submit(MODEL, [NewJob(f"t{i}", "32", 2)])]
        done = 0
        while batch := q.claim(MODEL, "w1", max_batch=4):
            done += q.complete(MODEL, [Outcome.ok(j.id, j.input) for j in batch.jobs], "w1")[0]
        assert done == len(subs) == 60
        calls = [_script_calls(n) - b for n, b in zip(nodes, before, strict=True)]
        # 20 submits, 5 claims and 5 completes per shard (and a few empty claims).
        assert all(c >= 30 for c in calls), calls
        assert max(calls) < 2 * min(calls), calls
    finally:
        q.redis.close()
        for n in nodes:
            n.close()


def test_moving_a_partition_slot_under_load_loses_and_repeats_nothing(
    cluster: LocalCluster,
) -> None:
    load, moved = move_slot_under_load(cluster, MODELS, MODEL, _slot(1))
    assert moved > 30
    stats = every_job_ran_once(cluster.url, MODELS, MODEL, load)
    assert {keys.partition_of(i) for i in load.ran} == {0, 1, 2}
    assert stats.in_flight == 0 and stats.queued == 0


def _add_replica(cluster: LocalCluster, primary: RedisServer) -> RedisServer:
    """A new cluster node replicating ``primary``, synced before it returns."""
    port = cluster_port()  # its bus port (+10000) free too
    rep = RedisServer(port=port, binary=cluster.binary, extra_args=cluster._node_args(port))
    cluster.nodes.append(rep.start())  # stopped with the cluster
    c = cluster.client(rep)
    others = [cluster.client(n) for n in cluster.nodes if n.port != rep.port]
    try:
        c.execute_command("CLUSTER MEET", "127.0.0.1", primary.port)
        pid, rid = cluster.node_id(primary), cluster.node_id(rep)
        # Every primary must know it, or none votes for it when its primary fails.
        wait_until(lambda: all(_knows(o, rid) for o in others), HUNG_S, "all know the replica")
        c.execute_command("CLUSTER REPLICATE", pid)
        wait_until(lambda: c.info("replication").get("master_link_status") == "up", HUNG_S)
        # Without full coverage required, the other shards serve while one fails over.
        for node in [c, *others]:
            node.config_set("cluster-require-full-coverage", "no")
    finally:
        for node in [c, *others]:
            node.close()
    return rep


def _promote(cluster: LocalCluster, replica: RedisServer) -> None:
    """The replica takes its dead primary's slots now. Redis elects it by itself
    once the primary has been unreachable for the node timeout, but how soon the
    vote lands depends on the machine's load (a crowded CI run once waited past
    80 s); what the test proves is Sluice's side (the other partitions serve, the
    replicated jobs are kept), so it promotes the replica as an operator would."""
    c = cluster.client(replica)
    try:
        if c.info("replication").get("role") == "slave":
            c.execute_command("CLUSTER FAILOVER", "TAKEOVER")
    except redis.ResponseError:
        pass  # elected meanwhile: it is a primary already
    finally:
        c.close()


def _knows(c: redis.Redis, node_id: str) -> bool:
    nodes = c.execute_command("CLUSTER NODES")  # redis-py: address -> fields
    return any(v.get("node_id") == node_id for v in nodes.values())


def _offset(node: RedisServer, field: str) -> int:
    c = redis.Redis(port=node.port, socket_timeout=2, decode_responses=True)
    try:
        return int(c.info("replication").get(field, 0))
    finally:
        c.close()


def test_a_shard_primary_killed_under_load_fails_over_and_keeps_what_it_replicated() -> None:
    with LocalCluster(3) as cluster:
        primary = cluster.owner(_slot(1))
        replica = _add_replica(cluster, primary)
        load = Load(cluster.url, MODELS, MODEL, give_up=True).start()
        try:
            wait_until(lambda: len(load.accepted) >= 200, HUNG_S, "200 accepted jobs")
            # Every job acknowledged before this point is on the replica once its
            # offset reaches the primary's (asynchronous replication, ADR 0133).
            kept = dict(load.accepted)
            target = _offset(primary, "master_repl_offset")
            wait_until(lambda: _offset(replica, "slave_repl_offset") >= target, HUNG_S)
            assert primary.proc is not None
            primary.proc.kill()
            primary.proc.wait()
            base = len(load.accepted)
            # The other two partitions keep taking jobs while the shard fails over.
            wait_until(lambda: len(load.accepted) >= base + 100, HUNG_S, "submits meanwhile")
            _promote(cluster, replica)
            wait_until(lambda: cluster.owner(_slot(1)).port == replica.port, HUNG_S * 2)
            after = {keys.partition_of(i) for i in list(load.accepted.values())[base:]}
            wait_until(
                lambda: 1 in {keys.partition_of(i) for i in list(load.accepted.values())[base:]},
                HUNG_S * 2,
                "a submit to the failed-over partition",
            )
            assert after >= {0, 2}
        finally:
            load.join()
        q = QueueClient(connect(cluster.url), MODELS)
        try:
            for text, job_id in kept.items():
                rec = wait_until(lambda job_id=job_id: _done(q, job_id), HUNG_S)
                assert rec.result == text, (job_id, rec)
            assert load.refusals("submit") > 0  # the dead shard's partition refused meanwhile
        finally:
            q.redis.close()


def _done(q: QueueClient, job_id: str):  # type: ignore[no-untyped-def]
    """The job's record once it succeeded (a lapsed lease runs it again: at least once)."""
    try:
        rec = q.get(job_id, MODEL)
    except RedisUnavailable:
        return None
    return rec if rec.status is JobStatus.SUCCEEDED else None
