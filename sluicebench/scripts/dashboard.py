"""What the live dashboard costs Redis and the gateway, with 1 and 10 viewers.

sluice bench dashboard [--seconds 10] [--workers 50] [--models 3] [--json PATH]

A real redis-server seeded like a busy deployment (per model: --workers live
workers, queued jobs in every bucket, latency histograms, an autoscaler log,
dead letters); the gateway app in-process; each viewer polls
/dashboard/api/state once a second, as the page does. Side by side in one run:
1 viewer, 10 viewers sharing the cached refresh (the shipped behaviour), and 10
viewers with the cache off (every request reads Redis). Redis commands are
counted by the server (INFO), less an idle run's (the gateway's own snapshots).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import redis

from gateway.app import create_app
from gateway.dashboard.feed import DashboardFeed
from sluice import keys, registry
from sluice.config import SluiceConfig, parse_config
from sluice.jobs import NewJob, Outcome
from sluice.local.redis_server import start_redis
from sluice.queue import QueueClient
from sluice.registry import WorkerInfo
from sluice.waits import window_start

SCENARIOS = (
    ("idle (no viewer)", 0, True),
    ("1 viewer", 1, True),
    ("10 viewers, shared cache", 10, True),
    ("10 viewers, no cache", 10, False),
)


def config(n_models: int) -> SluiceConfig:
    model = {"handler": "synthetic", "buckets": [32, 128, 512], "cost": {"method": "words"}}
    return parse_config({"models": {f"model{i}": model for i in range(n_models)}})


def seed(r: redis.Redis, cfg: SluiceConfig, n_workers: int) -> None:
    q = QueueClient(r, dict(cfg.models))
    now = time.time()
    for name in cfg.models:
        subs = q.submit(
            name, [NewJob(input="x", bucket=b, cost=int(b)) for b in ("32", "128", "512") * 40]
        )
        batch = q.claim(name, "seed", max_batch=10)
        q.complete(
            name,
            [Outcome.fail(j.id, "oom", "out of memory") for j in batch.jobs[:5]]
            + [Outcome.ok(j.id, 1) for j in batch.jobs[5:]],
        )
        pipe = r.pipeline(transaction=False)
        for i in range(n_workers):
            info = WorkerInfo(
                id=f"node{i // 8}-{1000 + i}-{i:04x}",
                model=name,
                host="node",
                pid=1000 + i,
                device=f"cuda:{i % 8}",
                buckets=["32", "128", "512"],
                state="ready",
                started_at=now,
                heartbeat_at=now,
                service_rate=1000.0,
                batch_size=16,
            )
            for cmd in registry.heartbeat(info, 600):
                pipe.execute_command(*cmd)
        for log in range(50):
            pipe.lpush(
                keys.decisions_key(name),
                json.dumps({"at_ms": log, "current": 2, "desired": 3, "reason": "load"}),
            )
        pipe.hset(
            keys.scale_state_key(name),
            mapping={"at_ms": int(now * 1000), "current": 2, "desired": 3, "reason": "load"},
        )
        pipe.hset(keys.wait_hist_key(name, window_start(now)), mapping={"10": 90, "count": 90})
        pipe.execute()
        assert len(subs) == 120


def commands_processed(r: redis.Redis) -> int:
    return int(r.info("stats")["total_commands_processed"])


async def run_scenario(
    cfg: SluiceConfig, url: str, viewers: int, cached: bool, seconds: float
) -> dict[str, Any]:
    app = create_app(cfg, url)
    side = redis.Redis.from_url(url)
    lat: list[float] = []
    sizes: list[int] = []
    async with app.router.lifespan_context(app):
        st = app.state.gateway
        feed = DashboardFeed(st.redis, dict(cfg.models), st.call, cache=cached)
        app.state.dashboard_feed = feed
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:

            async def viewer(offset: float) -> None:
                await asyncio.sleep(offset)
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    t0 = time.perf_counter()
                    resp = await c.get("/dashboard/api/state")
                    lat.append((time.perf_counter() - t0) * 1000)
                    sizes.append(len(resp.content))
                    assert resp.status_code == 200, resp.text
                    await asyncio.sleep(max(0.0, 1.0 - (time.perf_counter() - t0)))

            before = commands_processed(side)
            started = time.monotonic()
            if viewers:
                # Tabs opened at different moments: their polls are not in step.
                await asyncio.gather(*(viewer(i / max(viewers, 1)) for i in range(viewers)))
            else:
                await asyncio.sleep(seconds)
            elapsed = time.monotonic() - started
            cmds = commands_processed(side) - before
    side.close()
    return {
        "viewers": viewers,
        "cached": cached,
        "seconds": round(elapsed, 2),
        "requests": len(lat),
        "refreshes": feed.refreshes,
        "redis_commands_per_s": round(cmds / elapsed, 1),
        "p50_ms": round(statistics.median(lat), 2) if lat else None,
        "p99_ms": round(statistics.quantiles(lat, n=100)[98], 2) if len(lat) > 2 else None,
        "payload_kb": round(statistics.mean(sizes) / 1024, 1) if sizes else None,
    }


def report(rows: list[dict[str, Any]]) -> None:
    idle = rows[0]["redis_commands_per_s"]
    one = rows[1]["redis_commands_per_s"] - idle
    print(
        f"{'scenario':28} {'req':>5} {'reads':>6} {'cmds/s':>8} {'x 1 viewer':>10} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'KB':>6}"
    )
    for (label, _, _), row in zip(SCENARIOS, rows, strict=True):
        extra = row["redis_commands_per_s"] - idle
        row["dashboard_commands_per_s"] = round(extra, 1)
        row["ratio_to_one_viewer"] = round(extra / one, 2) if row["viewers"] and one > 0 else None
        ratio = f"{row['ratio_to_one_viewer']:.2f}" if row["ratio_to_one_viewer"] else "-"
        print(
            f"{label:28} {row['requests']:>5} {row['refreshes']:>6} "
            f"{row['redis_commands_per_s']:>8.1f} {ratio:>10} {row['p50_ms'] or 0:>7.2f} "
            f"{row['p99_ms'] or 0:>7.2f} {row['payload_kb'] or 0:>6}"
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="sluice bench dashboard", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=50)
    ap.add_argument("--models", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    server = start_redis()
    try:
        cfg = config(args.models)
        r = redis.Redis.from_url(server.url, decode_responses=True)
        seed(r, cfg, args.workers)
        rows = [
            asyncio.run(run_scenario(cfg, server.url, v, cached, args.seconds))
            for _, v, cached in SCENARIOS
        ]
        report(rows)
        print(
            f"\n{args.models} models x {args.workers} live workers each; commands/s include "
            "the gateway's own 1 s snapshots (the idle row); 'x 1 viewer' subtracts them."
        )
        if args.json:
            args.json.write_text(
                json.dumps({"models": args.models, "workers": args.workers, "rows": rows}, indent=2)
                + "\n"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
