"""``sluice bench redis-ha``: what replication, Sentinel and Cluster cost and buy.

1. The queue hop (submit, claim, complete; in-process) and single-job submits with
   ``durability: replica`` vs ``primary``, on a primary with one replica; and
   through a ``redis+sentinel://`` URL vs the primary's own ``redis://`` URL.
   ABBA order, medians: the second of a pair runs on a warmer server.
2. Failover: a Sentinel group under load through real gateway and worker
   processes (sluicebench/failover.py), SIGKILL the primary: seconds to a new
   primary, to the first 202 and to the first completed job, and jobs lost, for
   each durability setting.
3. Cluster: three models, one worker-like process each running the queue hop,
   on three shards vs on one (the same models, a one-shard cluster).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sluice.cli_common import write_json
from sluice.config import parse_config
from sluice.jobs import NewJob, Outcome
from sluice.local.redis_topology import LocalCluster, SentinelGroup
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluicebench.failover import run_failover

TEXT = "the quick brown fox jumps over the lazy dog"


def _models(names: list[str], durability: str = "primary") -> dict[str, Any]:
    model = {
        "handler": "synthetic",
        "cost": {"method": "words"},
        "queue": {
            "max_queued_jobs": 10_000_000,
            "max_queued_cost": 1_000_000_000,
            "durability": durability,
        },
    }
    return dict(parse_config({"models": {n: model for n in names}}).models)


def _hop(q: QueueClient, model: str, jobs: int) -> float:
    """Jobs/s through submit (chunks of 256), claim (32) and complete."""
    start = time.perf_counter()
    done = _hop_jobs(q, model, jobs)
    return done / (time.perf_counter() - start)


def _hop_jobs(q: QueueClient, model: str, jobs: int) -> int:
    for i in range(0, jobs, 256):
        q.submit(model, [NewJob(TEXT, "32", 9) for _ in range(min(256, jobs - i))])
    done = 0
    while done < jobs:
        batch = q.claim(model, "w1", max_batch=32)
        if not batch.jobs:
            break
        q.complete(model, [Outcome.ok(j.id, 1) for j in batch.jobs], "w1")
        done += len(batch.jobs)
    return done


def _submits(q: QueueClient, model: str, calls: int) -> float:
    """Single-job submits per second (what one client request costs Redis)."""
    start = time.perf_counter()
    for _ in range(calls):
        q.submit(model, [NewJob(TEXT, "32", 9)])
    return calls / (time.perf_counter() - start)


def _abba(a: Any, b: Any, rounds: int) -> tuple[list[float], list[float]]:
    xs: list[float] = []
    ys: list[float] = []
    for i in range(rounds):
        for which in ("a", "b") if i % 2 == 0 else ("b", "a"):
            (xs if which == "a" else ys).append(a() if which == "a" else b())
    return xs, ys


def _pair(name: str, xs: list[float], ys: list[float]) -> dict[str, Any]:
    x, y = statistics.median(xs), statistics.median(ys)
    return {
        "measure": name,
        "a_per_s": [round(v) for v in xs],
        "b_per_s": [round(v) for v in ys],
        "ratio_b_over_a": round(y / x, 3),
    }


def costs(jobs: int, calls: int, rounds: int) -> list[dict[str, Any]]:
    group = SentinelGroup(replicas=1, sentinels=1).start()
    try:
        direct = group.primary().url
        plain = QueueClient(connect(direct), _models(["m"], "primary"))
        durable = QueueClient(connect(direct), _models(["m"], "replica"))
        sentinel = QueueClient(connect(group.url), _models(["m"], "primary"))
        for q in (plain, durable, sentinel):
            _hop(q, "m", 500)  # warm-up: scripts loaded, connections open
        out = [
            _pair(
                "queue hop: primary (a) vs replica (b) durability",
                *_abba(lambda: _hop(plain, "m", jobs), lambda: _hop(durable, "m", jobs), rounds),
            ),
            _pair(
                "single-job submit: primary (a) vs replica (b) durability",
                *_abba(
                    lambda: _submits(plain, "m", calls),
                    lambda: _submits(durable, "m", calls),
                    rounds,
                ),
            ),
            _pair(
                "queue hop: redis:// (a) vs redis+sentinel:// (b)",
                *_abba(lambda: _hop(plain, "m", jobs), lambda: _hop(sentinel, "m", jobs), rounds),
            ),
        ]
        plain.redis.flushall()
        for q in (plain, durable, sentinel):
            q.redis.close()
        return out
    finally:
        group.stop()


def failovers(runs: int, lags: tuple[float, ...] = (0.0, 1.0)) -> list[dict[str, Any]]:
    """Each durability setting ``runs`` times per replica lag (ABBA)."""
    out = []
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-failover-"))
    for lag in lags:
        for i in range(runs):
            for d in ("primary", "replica") if i % 2 == 0 else ("replica", "primary"):
                res = run_failover(
                    d, tmp / f"{d}-{lag}-{i}", before_s=3.0, after_jobs=100, every_s=0.0, lag_s=lag
                )
                out.append(res.summary())
    return out


def _hop_worker(url: str, model: str, names: list[str], seconds: float, q: Any) -> None:
    client = QueueClient(connect(url), _models(names))
    _hop(client, model, 200)
    done, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        done += _hop_jobs(client, model, 512)
    client.redis.close()
    q.put(done)


def _cluster_rate(shards: int, names: list[str], seconds: float) -> float:
    with LocalCluster(shards) as cluster:
        results: Any = mp.Queue()
        procs = [
            mp.Process(target=_hop_worker, args=(cluster.url, n, names, seconds, results))
            for n in names
        ]
        for p in procs:
            p.start()
        total = sum(results.get(timeout=seconds + 120) for _ in procs)
        for p in procs:
            p.join(30)
        return total / seconds


def cluster(seconds: float, rounds: int) -> dict[str, Any]:
    names = LocalCluster(3).models_on_every_shard()  # one per shard of a 3-shard cluster
    one, three = _abba(
        lambda: _cluster_rate(1, names, seconds), lambda: _cluster_rate(3, names, seconds), rounds
    )
    return {
        "models": names,
        "seconds": seconds,
        **_pair("3 models: 1 shard (a) vs 3 (b)", one, three),
    }


def main(
    jobs: int, calls: int, rounds: int, failover_runs: int, cluster_s: float, json_path: Path | None
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count()},
        "costs": costs(jobs, calls, rounds),
        "failover": failovers(failover_runs),
        "cluster": cluster(cluster_s, max(2, rounds // 2)),
    }
    result["machine"]["loadavg_at_end"] = os.getloadavg()
    _print(result)
    write_json(json_path, result)
    return result


def _print(res: dict[str, Any]) -> None:
    print(f"{'measure':<58} {'a /s':>9} {'b /s':>9} {'b/a':>6}")
    for row in [*res["costs"], res["cluster"]]:
        print(
            f"{row['measure']:<58} {statistics.median(row['a_per_s']):>9.0f} "
            f"{statistics.median(row['b_per_s']):>9.0f} {row['ratio_b_over_a']:>6.3f}"
        )
    print()
    head = f"{'failover':<10} {'lag s':>5} {'accepted':>8} {'lost':>5} {'new primary s':>13}"
    print(f"{head} {'to 1st 202 s':>12} {'to 1st done s':>13}  non-202")
    for f in res["failover"]:
        print(
            f"{f['durability']:<10} {f['replica_lag_s']:>5} {f['accepted']:>8} {f['lost']:>5} "
            f"{f['failover_s']!s:>13} "
            f"{f['kill_to_first_202_s']!s:>12} {f['kill_to_first_completed_s']!s:>13}  "
            f"{f['non_202']}"
        )
