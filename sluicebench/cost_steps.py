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


# The last loop's commandstats breakdown of each step (see _breakdown).
DETAIL: dict[str, dict[str, Any]] = {}


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


def _commands(r: redis.Redis) -> dict[str, tuple[int, int]]:
    """INFO commandstats: command -> (calls, usec). A script's own line (evalsha)
    counts its whole run, the commands it runs included; theirs count apart too."""
    return {
        k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for k, v in r.info("commandstats").items()
    }


def _breakdown(r: redis.Redis, n_jobs: int) -> dict[str, Any]:
    """Per job since the last CONFIG RESETSTAT: each command's calls and usec, the
    scripts' usec less that of the commands they ran (their Lua), all commands."""
    got = {c: v for c, v in _commands(r).items() if c not in ("info", "config|resetstat")}
    scripts = sum(u for c, (_, u) in got.items() if c in ("evalsha", "eval"))
    inner = sum(u for c, (_, u) in got.items() if c not in ("evalsha", "eval", "ping"))
    return {
        "commands": round(sum(n for n, _ in got.values()) / n_jobs, 2),
        "command_us": round(inner / n_jobs, 1),
        "script_us": round(scripts / n_jobs, 1),
        "lua_us": round((scripts - inner) / n_jobs, 1) if scripts else 0.0,
        "by_command": {
            c: [round(n / n_jobs, 2), round(u / n_jobs, 2)] for c, (n, u) in sorted(got.items())
        },
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
                r.config_resetstat()
                a = _cpu(r)
                for _ in range(n):
                    step()
                out.setdefault(name, []).append((_cpu(r) - a) * 1e6 / (n * jobs))
                DETAIL[name] = _breakdown(r, n * jobs)
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
    ap.add_argument("-v", "--verbose", action="store_true", help="each step's commands")
    a = ap.parse_args()
    got = measure(a.calls, a.batch, a.repeats)
    print(f"{'step (per job)':45s} {'CPU us':>8s} {'cmds':>6s} {'in scripts':>10s} {'Lua':>6s}")
    for name, us in got.items():
        d = DETAIL[name]
        print(
            f"{name:45s} {us:8.1f} {d['commands']:6.2f} {d['script_us']:10.1f} {d['lua_us']:6.1f}"
        )
    if a.verbose:
        for name, d in DETAIL.items():
            print(name, json.dumps(d["by_command"]))
    if a.json:
        with open(a.json, "w") as f:
            out = {"calls": a.calls, "batch": a.batch, "us_per_job": got, "detail": DETAIL}
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
