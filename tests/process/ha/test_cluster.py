"""Redis Cluster: the whole stack (``sluice up``: gateway, autoscaler, workers,
notifier, bulk worker) on three shards with a model on each; ``sluice status`` and
the bad settings a cluster invites.

The protocol suite itself runs on a cluster in ``make test-cluster``
(SLUICE_TEST_REDIS=cluster, tests/conftest.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.crc import key_slot

from sluice import keys
from sluice.client import Client
from sluice.local.redis_server import RedisServer, start_redis
from sluice.local.redis_topology import LocalCluster
from tests.kit.cli import in_process as sluice
from tests.kit.http import HTTP
from tests.kit.upstack import Up, launch, shut_down
from tests.waits import wait_until

pytestmark = [pytest.mark.system]
# A hot model on 3 partitions (docs/adr/0159): its tags {wide}, {wide~1}, {wide~2}
# hash to slots on three different shards.
WIDE = "wide"


def _model(name: str) -> dict:
    return {
        "handler": "synthetic",
        "params": {"base_ms": 2, "per_token_ms": 0, "embedding_dim": 4},
        "buckets": [16, 64],
        "cost": {"method": "words"},
        "batching": {"max_batch": 16, "lease_s": 5},
        "autoscaling": {"min_replicas": 1, "max_replicas": 1},
    }


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3) as c:
        yield c


@pytest.fixture(scope="module")
def rq_redis() -> Iterator[RedisServer]:
    server = start_redis()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def up(
    cluster: LocalCluster, rq_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Up]:
    models = cluster.models_on_every_shard()
    config = {
        "models": {m: _model(m) for m in models}
        | {WIDE: _model(WIDE) | {"queue": {"partitions": 3}}},
        # RQ needs one plain Redis: bulk state stays on the cluster, RQ's queue here.
        "bulk": {"redis_url": rq_redis.url, "lease_s": 2, "poll_s": 0.05},
        "worker": {"heartbeat_s": 0.3, "heartbeat_ttl_s": 3},
    }
    stack = launch(config, tmp_path_factory.mktemp("cluster"), {"SLUICE_REDIS_URL": cluster.url})
    try:
        for m in [*models, WIDE]:
            wait_until(lambda m=m: stack.ready(m) >= 1, 60, f"a ready worker of {m}", every_s=0.2)
        yield stack
    finally:
        shut_down(stack)


def test_every_model_is_served_from_its_own_shard(up: Up, cluster: LocalCluster) -> None:
    models = cluster.models_on_every_shard()
    with Client(up.gateway) as c:
        for m in models:
            for i in range(5):
                job = c.predict(m, f"text {i} of {m}")
                assert job["status"] == "succeeded" and len(job["result"]["embedding"]) == 4
    # Each model's keys live on the shard that owns its hash tag, and only there.
    for shard, (m, node) in enumerate(zip(models, cluster.nodes, strict=True)):
        assert cluster.owner(key_slot(m.encode())).port == node.port, shard
        r = cluster.client(node)
        try:
            names = r.keys("sluice:*")
        finally:
            r.close()
        tags = {n.split("{", 1)[1].split("}", 1)[0] for n in names if "{" in n}
        tags = {t for t in tags if t.split("~")[0] != WIDE}  # spread over every shard
        assert tags == {m}, (shard, sorted(names)[:10])
        assert all("{" in n for n in names), [n for n in names if "{" not in n]  # no global key


def test_a_partitioned_model_is_served_from_every_shard(up: Up, cluster: LocalCluster) -> None:
    with Client(up.gateway) as c:
        jobs = [c.predict(WIDE, f"text {i}") for i in range(9)]
        assert all(j["status"] == "succeeded" for j in jobs), jobs
        assert {keys.partition_of(j["id"]) for j in jobs} == {0, 1, 2}
        assert all(c.get(j["id"])["status"] == "succeeded" for j in jobs)
    shards = set()
    for node in cluster.nodes:
        r = cluster.client(node)
        try:
            if any(n.startswith("sluice:{wide") and ":job:" in n for n in r.keys("sluice:*")):
                shards.add(node.port)
        finally:
            r.close()
    assert len(shards) == 3  # the model's jobs live on every shard


def test_reads_that_span_every_model_answer_on_a_cluster(up: Up, cluster: LocalCluster) -> None:
    models = cluster.models_on_every_shard()
    for path in ("/v1/models", "/dashboard/api/state", "/dashboard/api/history", "/metrics"):
        resp = HTTP.get(f"{up.gateway}{path}", timeout=30)
        assert resp.status_code == 200, (path, resp.text[:500])
        assert all(m in resp.text for m in models), path
    for m in models:
        dead = HTTP.get(f"{up.gateway}/v1/admin/webhooks", params={"model": m}, timeout=30)
        assert dead.status_code == 200 and dead.json()["dead"] == [], dead.text
    with Client(up.gateway) as c:
        job = c.predict(models[2], "one more")
    with HTTP.stream("GET", f"{up.gateway}/v1/jobs/{job['id']}/events", timeout=30) as resp:
        assert resp.status_code == 200 and "event: result" in resp.read().decode()


def test_no_process_of_the_stack_logged_a_traceback(up: Up) -> None:
    logs = Path(next(ln.split()[1] for ln in up.printed if ln.strip().startswith("logs ")))
    found = sorted(logs.rglob("*.log"))
    assert len(found) >= 4, found  # gateway, autoscaler, notifier, bulk worker (+ workers)
    for log in found:
        text = log.read_text(errors="replace")
        assert "Traceback" not in text and "Redis unavailable" not in text, (
            f"{log}:\n{text[-2000:]}"
        )


def test_bulk_jobs_run_with_rq_on_its_own_redis(up: Up, cluster: LocalCluster) -> None:
    m = cluster.models_on_every_shard()[1]
    lines = b"".join(
        json.dumps({"input": f"line {i}", "custom_id": f"c{i}"}).encode() + b"\n" for i in range(50)
    )
    with Client(up.gateway) as c:
        view = c.bulk_submit(m, lines)
        final = c.bulk_wait(view["id"], timeout_s=60, poll_s=0.2)
        assert final["state"] == "completed", final
        out = list(c.bulk_output(view["id"]))
    assert [o["custom_id"] for o in out] == [f"c{i}" for i in range(50)]


def test_status_reads_every_shard(up: Up, cluster: LocalCluster) -> None:
    done = sluice("status", "-c", str(up.config_path), "--redis-url", cluster.url)
    assert done.exit_code == 0, done.stderr
    for m in cluster.models_on_every_shard():
        assert m in done.stdout


def test_a_plain_url_at_a_cluster_node_and_a_cluster_url_at_a_plain_server_exit_2(
    up: Up, cluster: LocalCluster, rq_redis: RedisServer
) -> None:
    for url, says in [
        (cluster.nodes[0].url, "is a Redis Cluster node: use redis+cluster://"),
        (f"redis+cluster://127.0.0.1:{rq_redis.port}", "not in cluster mode"),
    ]:
        done = sluice("status", "-c", str(up.config_path), "--redis-url", url)
        assert done.exit_code == 2, (url, done.stderr)
        assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_bulk_without_its_own_redis_is_refused_clearly_on_a_cluster(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"models": {"m0": _model("m0")}}))
    done = sluice("bulk", "worker", "-c", str(cfg), "--redis-url", cluster.url)
    assert done.exit_code == 2 and "set bulk.redis_url" in done.stderr, done.stderr
