"""claim.lua with vs without its malformed-record check (ADR 0071): jobs/s claimed.

sluice bench claim-check [--jobs 20000] [--rounds 3] [--batch 32]
                                      [--before-rev 3257be9~1] [--json PATH]

Both scripts run against the same embedded Redis, alternating, each draining
the same freshly submitted queue at batch --batch; the table gives the median
and best jobs/s of each and the ratio. The script without the check is read
from git at --before-rev.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from sluice.config import parse_config
from sluice.jobs import NewJob
from sluice.local.redis_server import start_redis
from sluice.lua_loader import include
from sluice.queue.client import QueueClient, connect
from sluice.queue.scripts import script_source
from sluice.records import lua_constants

ROOT = Path(__file__).resolve().parents[2]  # the git checkout (for --before-rev)


def _old_claim(rev: str) -> str:
    common = lua_constants() + include("common")
    old = subprocess.run(
        ["git", "show", f"{rev}:sluice/queue/lua/claim.lua"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return common + "\n" + old


def _drain(qc: QueueClient, script: Any, jobs: int, batch: int) -> float:
    qc.redis.flushall()
    for _ in range(0, jobs, 500):
        qc.submit("m", [NewJob("w w w", "32", 3) for _ in range(500)])
    call = qc.ops.claim("m", "bench", max_batch=batch)
    taken, t0 = 0, time.perf_counter()
    while True:
        got = (len(script(keys=call.keys, args=call.args)) - 4) // 5
        if got == 0:
            break
        taken += got
    return taken / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="sluice bench claim-check", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--before-rev", default="3257be9~1")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    batching = {"max_batch": args.batch, "max_batch_tokens": 10**6}
    cfg = parse_config({"models": {"m": {"handler": "synthetic", "batching": batching}}})
    server = start_redis()
    try:
        r = connect(server.url)
        qc = QueueClient(r, dict(cfg.models))
        scripts = {
            "without check": r.register_script(_old_claim(args.before_rev)),
            "with check": r.register_script(script_source("claim")),
        }
        rates: dict[str, list[float]] = {name: [] for name in scripts}
        for _ in range(args.rounds):
            for name, script in scripts.items():
                rates[name].append(_drain(qc, script, args.jobs, args.batch))
    finally:
        server.stop()
    print(f"{'claim.lua':16} {'median jobs/s':>14} {'best jobs/s':>12}")
    for name, xs in rates.items():
        print(f"{name:16} {statistics.median(xs):>14.0f} {max(xs):>12.0f}")
    ratio = statistics.median(rates["with check"]) / statistics.median(rates["without check"])
    print(f"median ratio with/without: {ratio:.3f}")
    if args.json:
        out = {"batch": args.batch, "jobs": args.jobs, "rates": rates, "ratio": ratio}
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
