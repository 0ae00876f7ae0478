"""A model's slot moved to another cluster node while it is used (what ``redis-cli
--cluster reshard`` does): every script stops before its first write while the slot
is split between nodes (the slot guard in _common.lua), clients retry, and nothing
accepted is lost or run twice."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from redis.crc import key_slot
from redis.exceptions import ResponseError

from sluice import keys
from sluice.config import parse_config
from sluice.errors import RedisUnavailable
from sluice.jobs import JobStatus, NewJob, Outcome
from sluice.local.redis_topology import LocalCluster
from sluice.lua_loader import include
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.queue.scripts import Call
from tests.kit.queue_load import every_job_ran_once, move_slot_under_load

pytestmark = [pytest.mark.system]
MODEL = "m0"
MODELS = dict(parse_config({"models": {MODEL: {"handler": "synthetic", "buckets": [32]}}}).models)


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(2) as c:
        yield c


def _split(cluster: LocalCluster, key: str) -> tuple[Any, Any, Any]:
    """Mark MODEL's slot migrating from its node to the other one, and move ``key``."""
    slot = key_slot(MODEL.encode())
    src = cluster.owner(slot)
    dst = next(n for n in cluster.nodes if n.port != src.port)
    s, d = cluster.client(src), cluster.client(dst)
    d.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", cluster.node_id(src))
    s.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", cluster.node_id(dst))
    s.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", key)
    return s, d, dst


def test_the_slot_guard_stops_a_script_before_its_first_write(cluster: LocalCluster) -> None:
    declared, moved = keys.stats_key(MODEL), keys.job_key(MODEL, "x")
    body = "redis.call('SET', KEYS[1], 'written')\nreturn redis.call('GET', ARGV[1])"
    q = QueueClient(connect(cluster.url), MODELS)
    q.register({"guarded": include("common") + "\n" + body})
    try:
        q.redis.set(declared, "before")
        q.redis.set(moved, "record")
        s, d, _ = _split(cluster, moved)
        # Unguarded, the script writes, then fails on the moved key: the write stays.
        with pytest.raises(ResponseError, match="non local key"):
            s.eval(body, 1, declared, moved)
        assert s.get(declared) == "written"
        s.set(declared, "before")
        # Guarded, it stops before writing; the caller is told to retry.
        with pytest.raises(RedisUnavailable, match="slot is moving"):
            q.run(Call(lambda r: r, "guarded", [declared], [moved]))
        assert s.get(declared) == "before"
        s.close()
        d.close()
    finally:
        q.redis.close()


def test_a_claim_mid_move_pops_nothing_and_runs_after_it(cluster: LocalCluster) -> None:
    q = QueueClient(connect(cluster.url), MODELS)
    try:
        [job] = q.submit(MODEL, [NewJob("a b", "32", 2)])
        # The record moves first; its queue is still on the old node.
        s, d, dst = _split(cluster, keys.job_key(MODEL, job.id))
        with pytest.raises(RedisUnavailable):
            q.claim(MODEL, "w1")
        assert s.zcard(keys.queue_key(MODEL, "32")) == 1  # nothing was popped
        s.close()
        d.close()
        cluster.migrate_slot(key_slot(MODEL.encode()), dst)  # the rest, then hand over
        batch = q.claim(MODEL, "w1")
        assert [j.id for j in batch.jobs] == [job.id]
        q.complete(MODEL, [Outcome.ok(job.id, "done")], "w1")
        assert q.get(job.id, MODEL).status is JobStatus.SUCCEEDED
    finally:
        q.redis.close()


def test_a_reshard_under_load_loses_and_repeats_nothing(cluster: LocalCluster) -> None:
    load, moved = move_slot_under_load(cluster, MODELS, MODEL, key_slot(MODEL.encode()))
    assert moved > 100
    stats = every_job_ran_once(cluster.url, MODELS, MODEL, load)
    assert stats.in_flight == 0 and sum(b.queued for b in stats.buckets) == 0
