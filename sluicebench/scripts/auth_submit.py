"""Cost of API keys on the submit call, without HTTP: open vs keyed, side by side.

sluice bench auth-submit [--jobs 3000] [--rounds 5] [--json PATH]

One private redis-server; model `bench`. Rounds alternate the cases, each
submitting `--jobs` single-job calls through `QueueClient.submit`:
  open   no owner (what a gateway without keys sends)
  keyed  an owner with a cap on unfinished jobs and a rate limit (never reached),
         so the script runs its per-key code on every call
Per case: the Redis-side time per script call (INFO commandstats, usec_per_call
of evalsha, reset before each case) and the client's CPU per call (building and
packing the call, parsing the reply). Medians over rounds; the ratio keyed/open.
Run from an older tree (PYTHONPATH=<tree>), where `Owner` does not exist, it
measures `open` only: the same figure before and after a change.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:  # the rest inside main: `sluice --help` registers `cli` without them
    from sluice.queue import QueueClient

MODEL = "bench"
CONFIG = {
    "models": {
        MODEL: {
            "handler": "synthetic",
            "cost": {"method": "words"},
            "queue": {"max_queued_jobs": 10_000_000, "max_queued_cost": 1_000_000_000},
        }
    }
}


def _case(q: QueueClient, jobs: int, owner: Any) -> dict[str, float]:
    from sluice.jobs import NewJob

    q.redis.flushall()
    q.redis.config_resetstat()
    kw = {"owner": owner} if owner is not None else {}
    job = NewJob("the quick brown fox", "32", 4)
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(jobs):
        q.submit(MODEL, [job], max_jobs=10_000_000, max_cost=1_000_000_000, **kw)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    stats = q.redis.info("commandstats").get("cmdstat_evalsha", {})
    return {
        "redis_us_per_call": float(stats.get("usec_per_call", 0.0)),
        "client_cpu_us_per_call": cpu / jobs * 1e6,
        "wall_us_per_call": wall / jobs * 1e6,
    }


def main(jobs: int, rounds: int, json_path: Path | None) -> dict[str, Any]:
    import sluice.jobs
    from sluice.config import parse_config
    from sluice.local.redis_server import start_redis
    from sluice.queue import QueueClient
    from sluice.queue.client import connect

    # None in a tree from before access control: only the open case runs there.
    owner_type: Any = getattr(sluice.jobs, "Owner", None)
    server = start_redis()
    q = QueueClient(connect(server.url), dict(parse_config(CONFIG).models))
    cases: dict[str, Any] = {"open": None}
    if owner_type is not None:
        cases["keyed"] = owner_type("bench", max_unfinished=10**9, rate_per_s=1e9, burst=10**9)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    try:
        _case(q, min(jobs, 500), None)  # warm-up: scripts loaded, connection open
        for _ in range(rounds):
            for name, owner in cases.items():
                runs[name].append(_case(q, jobs, owner))
    finally:
        q.redis.close()
        server.stop()
    med = {
        name: {k: round(statistics.median(r[k] for r in rs), 2) for k in rs[0]}
        for name, rs in runs.items()
    }
    result: dict[str, Any] = {
        "jobs": jobs,
        "rounds": rounds,
        "median": med,
        "runs": runs,
        "loadavg_at_end": os.getloadavg(),
    }
    print(f"{'case':<6} {'redis us/call':>14} {'client CPU us/call':>19} {'wall us/call':>13}")
    for name, m in med.items():
        print(
            f"{name:<6} {m['redis_us_per_call']:>14.2f} {m['client_cpu_us_per_call']:>19.2f} "
            f"{m['wall_us_per_call']:>13.2f}"
        )
    if "keyed" in med:
        ratio = {k: round(med["keyed"][k] / med["open"][k], 3) for k in med["open"]}
        result["ratio_keyed_over_open"] = ratio
        print(
            f"keyed/open: redis {ratio['redis_us_per_call']:.2f}, "
            f"client CPU {ratio['client_cpu_us_per_call']:.2f}"
        )
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        print(f"wrote {json_path}", file=sys.stderr)
    return result


def cli(
    jobs: Annotated[int, typer.Option(help="Single-job submits per case and round.")] = 3000,
    rounds: Annotated[int, typer.Option(help="Rounds; the cases alternate in each.")] = 5,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write results here.")] = None,
) -> None:
    """Cost of API keys on the submit call (Redis time and client CPU), open vs keyed."""
    main(jobs, rounds, json_path)


if __name__ == "__main__":
    typer.run(cli)
