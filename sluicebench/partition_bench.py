"""Per-shard Redis CPU per job with a model on 1 and on N partitions (queue.partitions,
docs/adr/0159), on a real 3-shard Redis Cluster on loopback.

Each run flushes the cluster, resets every node's counters, then pushes ``jobs``
jobs through the protocol as a gateway and a worker do (one submit per job, claims
of ``batch``, one complete per batch), and reads each node's own CPU (``INFO cpu``:
used_cpu_sys + used_cpu_user, the server's whole process) and its commands
(``INFO commandstats``, script bodies included). The busiest shard's CPU per job
bounds the model's rate: one core per shard saturates at 1 s / that.

    python -m sluicebench.partition_bench --jobs 6000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import redis

from sluice.config import parse_config
from sluice.jobs import NewJob, Outcome
from sluice.local.redis_topology import LocalCluster
from sluice.queue import QueueClient
from sluice.queue.client import connect

MODEL = "m"  # its tags {m}, {m~1}, {m~2} hash to three different shards
RUNNING = Path("/tmp/bench-running")


def _models(partitions: int) -> dict[str, Any]:
    cfg = {"handler": "synthetic", "buckets": [32], "queue": {"partitions": partitions}}
    return dict(parse_config({"models": {MODEL: cfg}}).models)


def _node_reading(c: redis.Redis) -> tuple[float, int, int]:
    cpu = c.info("cpu")
    cmds = c.info("commandstats")
    calls = sum(int(v["calls"]) for k, v in cmds.items() if not k.endswith(("info", "config")))
    usec = sum(int(v["usec"]) for k, v in cmds.items() if not k.endswith(("info", "config")))
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]), calls, usec


def _drive(q: QueueClient, jobs: int, batch: int) -> float:
    """Submit ``jobs`` one by one, claiming and completing whenever a batch is due."""
    t0 = time.perf_counter()
    done = 0
    for i in range(jobs):
        q.submit(MODEL, [NewJob(f"text {i}", "32", 4)])
        if (i + 1) % batch == 0:
            done += _drain(q, batch)
    while done < jobs:
        done += _drain(q, batch)
    return time.perf_counter() - t0


def _drain(q: QueueClient, batch: int) -> int:
    got = q.claim(MODEL, "w1", max_batch=batch)
    if got.jobs:
        q.complete(MODEL, [Outcome.ok(j.id, j.input) for j in got.jobs], "w1")
    return len(got.jobs)


def run_one(cluster: LocalCluster, partitions: int, jobs: int, batch: int) -> dict[str, Any]:
    nodes = [cluster.client(n) for n in cluster.nodes]
    for c in nodes:
        c.flushall()
        c.config_resetstat()
    q = QueueClient(connect(cluster.url), _models(partitions))
    try:
        q.submit(MODEL, [NewJob("warm", "32", 4)])  # scripts loaded, then counted from here
        _drain(q, batch)
        before = [_node_reading(c) for c in nodes]
        wall = _drive(q, jobs, batch)
        after = [_node_reading(c) for c in nodes]
    finally:
        q.redis.close()
        for c in nodes:
            c.close()
    shards = []
    for n, (b, a) in enumerate(zip(before, after, strict=True)):
        cpu_s, calls, usec = a[0] - b[0], a[1] - b[1], a[2] - b[2]
        shards.append(
            {
                "shard": n,
                "cpu_us_per_job": round(cpu_s * 1e6 / jobs, 1),
                "cmd_us_per_job": round(usec / jobs, 1),
                "commands_per_job": round(calls / jobs, 2),
            }
        )
    busiest = max(s["cpu_us_per_job"] for s in shards)
    return {
        "partitions": partitions,
        "jobs": jobs,
        "batch": batch,
        "wall_s": round(wall, 2),
        "shards": shards,
        "total_cpu_us_per_job": round(sum(s["cpu_us_per_job"] for s in shards), 1),
        "busiest_shard_cpu_us_per_job": busiest,
        "ceiling_jobs_per_s": int(1e6 / busiest) if busiest else None,
    }


def table(runs: list[dict[str, Any]]) -> str:
    rows = [
        "| partitions | shard | Redis CPU us/job | command us/job | commands/job |",
        "|---|---|---|---|---|",
    ]
    for r in runs:
        for s in r["shards"]:
            rows.append(
                f"| {r['partitions']} | {s['shard']} | {s['cpu_us_per_job']} | "
                f"{s['cmd_us_per_job']} | {s['commands_per_job']} |"
            )
    rows += ["", "| partitions | total CPU us/job | busiest shard us/job | ceiling jobs/s |"]
    rows.append("|---|---|---|---|")
    for r in runs:
        rows.append(
            f"| {r['partitions']} | {r['total_cpu_us_per_job']} | "
            f"{r['busiest_shard_cpu_us_per_job']} | {r['ceiling_jobs_per_s']} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=6000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--partitions", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--no-mark", action="store_true", help=f"do not write {RUNNING} (a smoke run)")
    a = ap.parse_args(argv)
    if not a.no_mark:  # others see a benchmark is running (and wait with theirs)
        RUNNING.write_text("partition_bench\n")
    try:
        with LocalCluster(3) as cluster:
            runs = [run_one(cluster, n, a.jobs, a.batch) for n in a.partitions]
    finally:
        if not a.no_mark:
            RUNNING.unlink(missing_ok=True)
    print(table(runs))
    if a.json:
        a.json.write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
