"""``sluice bench hop-ab``: the queue hop of this checkout vs another one, side by side.

For a change to the queue protocol's scripts, "no slower than before" is a ratio
measured in one run: the same in-process hop (submit in 256-job chunks, claim
batches of 32, complete each with a small result) alternates between this
checkout and another (``git worktree add /tmp/base <rev>``), each in a fresh
interpreter whose ``PYTHONPATH`` puts that checkout first, on one redis-server,
in ABBA order (the same code on both sides measured 0.947 when one always ran
second).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from sluice.cli_common import write_json
from sluice.local.redis_server import start_redis

HOP = r"""
import sys, time
from sluice.config import parse_config
from sluice.jobs import NewJob, Outcome
from sluice.queue import QueueClient
from sluice.queue.client import connect
url, jobs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
limits = {"max_queued_jobs": 10**7, "max_queued_cost": 10**9}
cfg = parse_config({"models": {"bench": {"handler": "synthetic", "queue": limits}}})
q = QueueClient(connect(url), dict(cfg.models))
out = []
for r in range(rounds + 1):  # round 0 warms up
    q.redis.flushdb()
    t = time.perf_counter()
    for i in range(0, jobs, 256):
        n = min(256, jobs - i)
        q.submit("bench", [NewJob("the quick brown fox", "32", 9) for _ in range(n)])
    done = 0
    while done < jobs:
        b = q.claim("bench", "w", max_batch=32)
        q.complete("bench", [Outcome.ok(j.id, [0.1] * 16) for j in b.jobs], "w")
        done += len(b.jobs)
    if r:
        out.append(jobs / (time.perf_counter() - t))
print(" ".join(f"{x:.1f}" for x in out))
"""


def _run(checkout: Path, url: str, jobs: int, rounds: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", HOP, url, str(jobs), str(rounds)],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise RuntimeError(f"the hop in {checkout} failed: {out.stderr[-800:]}")
    return [float(x) for x in out.stdout.split()]


def main(other: Path, jobs: int, alternations: int, json_path: Path | None) -> dict[str, Any]:
    here = Path(__file__).resolve().parent.parent
    redis = start_redis()
    runs: dict[str, list[float]] = {"this": [], "other": []}
    try:
        for i in range(alternations):
            # ABBA: whichever runs second in a pair measured ~5% slower with the same
            # code on both sides (the server's state after a run), so the order alternates.
            order = ("other", "this") if i % 2 == 0 else ("this", "other")
            for name in order:
                runs[name] += _run(other.resolve() if name == "other" else here, redis.url, jobs, 2)
    finally:
        redis.stop()
    med = {k: statistics.median(v) for k, v in runs.items()}
    result = {
        "this": str(here),
        "other": str(other.resolve()),
        "jobs_per_round": jobs,
        "jobs_per_s": {k: [round(x) for x in v] for k, v in runs.items()},
        "median_jobs_per_s": {k: round(v) for k, v in med.items()},
        "ratio_this_over_other": round(med["this"] / med["other"], 3),
    }
    print(f"{'checkout':<10} {'median jobs/s':>14}  rounds")
    for k in ("other", "this"):
        print(f"{k:<10} {med[k]:>14.0f}  {' '.join(f'{x:.0f}' for x in runs[k])}")
    print(f"this / other: {result['ratio_this_over_other']:.3f}")
    write_json(json_path, result)
    return result
