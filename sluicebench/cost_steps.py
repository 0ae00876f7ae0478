"""Redis CPU per step of the queue protocol, each step alone (docs/benchmarks/cost.md).

``python -m sluicebench.cost_steps [--calls N] [--batch K] [--repeats R]`` (or
``PYTHONPATH=CHECKOUT python sluicebench/cost_steps.py``: it imports only
``sluice`` and libraries, so it measures another checkout's scripts too): on a
private ``redis-server``, runs each step N times with this checkout's client and
scripts and reads ``INFO cpu`` (user + system: commands and network syscalls)
around the loop; prints the median of R loops per step, per job. The steps: a
round trip (``PING``), the cheapest script call (``return 1``), a one-job submit,
K one-job requests in one submit call (what the gateway's coalescing sends, ADR
0161) or K jobs of one request, a claim and a complete of K jobs (each answered with a 384-float
embedding, as ``sluice bench cost``'s stand-in worker does), and the gateway's
read of an ended job, K to a round trip.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from typing import Any

import redis

from sluice.config import parse_config
from sluice.jobs import NewJob, Outcome
from sluice.local.redis_server import start_redis
from sluice.queue import QueueClient

MODEL = "bench"
TEXT = "the quick brown fox jumps over the lazy dog and keeps running far away"
RESULT = {"embedding": [round(0.001 * (i % 997) - 0.4, 6) for i in range(384)]}


def _cpu(r: redis.Redis) -> float:
    c = r.info("cpu")
    return float(c["used_cpu_sys"]) + float(c["used_cpu_user"])


def _job() -> NewJob:
    return NewJob(input={"text": TEXT}, bucket="32", cost=14)


def _steps(r: redis.Redis, q: QueueClient, k: int) -> dict[str, tuple[Callable[[], Any], int]]:
    """Each step: (one run of it, the jobs it handles). Claim and complete feed on
    the jobs the submits before them queued."""
    one = r.register_script("return 1")
    claimed: list[Any] = []

    def claim() -> None:
        claimed.append(q.claim(MODEL, "w", max_batch=k))

    def complete() -> None:
        batch = claimed.pop()
        q.complete(MODEL, [Outcome.ok(j.id, RESULT) for j in batch.jobs], "w")
        ended.extend(j.id for j in batch.jobs)

    ended: list[str] = []

    def read() -> None:
        pipe = r.pipeline(transaction=False)
        for jid in ended[-k:]:
            for cmd in q.ops.get(jid).commands:
                pipe.execute_command(*cmd)
        pipe.execute()

    steps: dict[str, tuple[Callable[[], Any], int]] = {
        "round trip (PING)": (r.ping, 1),
        "script call (return 1)": (one, 1),
        "submit, 1 job a call": (lambda: q.submit(MODEL, [_job()]), 1),
        f"submit, one request of {k} jobs": (lambda: q.submit(MODEL, [_job()] * k), k),
    }
    if hasattr(q.ops, "submit_many"):  # a checkout before ADR 0161 has none
        steps[f"submit, {k} one-job requests a call"] = (
            lambda: q.run(q.ops.submit_many(MODEL, [[_job()] for _ in range(k)])),
            k,
        )
    return steps | {
        f"claim, batch {k}": (claim, k),
        f"complete, batch {k}": (complete, k),
        f"read of an ended job, {k} a round trip": (read, k),
    }


def measure(calls: int, k: int, repeats: int) -> dict[str, float]:
    """Median Redis CPU (us) per job of each step."""
    server = start_redis()
    r = redis.Redis.from_url(server.url, decode_responses=True)
    cfg = parse_config({"models": {MODEL: {"handler": "synthetic", "cost": {"method": "words"}}}})
    q = QueueClient(r, dict(cfg.models))
    out: dict[str, list[float]] = {}
    try:
        for _ in range(repeats):
            for name, (step, jobs) in _steps(r, q, k).items():
                n = calls if jobs == 1 else max(calls // k, 1)
                step()  # scripts loaded, connection warm
                a = _cpu(r)
                for _ in range(n):
                    step()
                out.setdefault(name, []).append((_cpu(r) - a) * 1e6 / (n * jobs))
            r.flushall()
    finally:
        r.close()
        server.stop()
    return {name: round(statistics.median(v), 1) for name, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000, help="runs of each one-job step")
    ap.add_argument("--batch", type=int, default=13, help="K: requests a call, jobs a batch")
    ap.add_argument("--repeats", type=int, default=3, help="loops per step (median)")
    ap.add_argument("--json", default="", help="also write the figures here")
    a = ap.parse_args()
    got = measure(a.calls, a.batch, a.repeats)
    for name, us in got.items():
        print(f"{name:45s} {us:8.1f} us per job")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"calls": a.calls, "batch": a.batch, "us_per_job": got}, f, indent=1)


if __name__ == "__main__":
    main()
