"""``sluice bench gateway``: submit throughput and latency, and long-poll wake-up.

In one run, on loopback: the gateway with 1 and 2 uvicorn processes and a bare
FastAPI endpoint doing one Redis round trip (same server stack) at the same
offered rates and at saturation, for the ratio; then the long-poll wake-up
latency (completion to response) at a fixed job rate. With ``keys``, a third
server, the gateway with API keys configured (per-key rate limit and cap set,
so the submit script runs its per-key code), is measured side by side.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from sluice.apikeys import hash_key
from sluice.cli_common import write_json
from sluice.config import parse_config
from sluice.jobs import Outcome
from sluice.local.redis_server import free_port, start_redis
from sluice.queue import AsyncQueueClient
from sluice.queue.client import connect_async
from sluicebench.gateway_bare import BARE_URL_ENV
from sluicebench.gateway_loops import RunResult, closed_loop, engine, open_loop
from sluicebench.ready import wait_ready

MODEL = "bench"
BODY = b'{"input": "the quick brown fox jumps over the lazy dog"}'
CONFIG: dict[str, Any] = {
    "models": {
        MODEL: {
            "handler": "synthetic",
            "cost": {"method": "words"},
            "queue": {"max_queued_jobs": 10_000_000, "max_queued_cost": 1_000_000_000},
            "autoscaling": {"min_replicas": 0},
        }
    },
}
BENCH_KEY = "sk_bench-0123456789abcdef0123456789abcdef"
# Limits far above the offered load: the per-key code runs, nothing is refused.
AUTH: dict[str, Any] = {
    "keys": [
        {
            "name": "bench",
            "hash": hash_key(BENCH_KEY),
            "rate_limit_per_s": 1e9,
            "burst": 10**9,
            "max_queued_jobs": 10**9,
        },
        *({"name": f"other{i}", "hash": hash_key(f"sk_other{i}")} for i in range(4)),
    ]
}
KEYED = "gateway+keys"


@dataclass
class Server:
    name: str
    processes: int
    port: int
    path: str
    proc: subprocess.Popen[bytes]
    headers: dict[str, str] = field(default_factory=dict)


def _start(name: str, processes: int, cfg_path: Path, redis_url: str) -> Server:
    port = free_port()
    headers: dict[str, str] = {}
    if name.startswith("gateway"):
        if name == KEYED:
            cfg_path = cfg_path.with_name("sluice-keys.yaml")
            headers = {"Authorization": f"Bearer {BENCH_KEY}"}
        cmd = [
            sys.executable,
            "-c",
            "from sluice.cli import main; main()",
            "gateway",
            "--config",
            str(cfg_path),
            "--redis-url",
            redis_url,
        ]
        path = f"/v1/models/{MODEL}/jobs"
    else:
        cmd = [
            sys.executable,
            "-m",
            "uvicorn",
            "sluicebench.gateway_bare:create_bare_app",
            "--factory",
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--log-level",
            "warning",
            "--no-access-log",
        ]
        path = "/bare"
    cmd += ["--port", str(port), "--workers", str(processes)]
    env = {**os.environ, BARE_URL_ENV: redis_url, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, env=env)
    if wait_ready(f"http://127.0.0.1:{port}/openapi.json", 30):
        return Server(name, processes, port, path, proc, headers)
    proc.terminate()
    raise RuntimeError(f"{name} did not start on port {port}")


def _stop(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(10)
    except subprocess.TimeoutExpired:
        server.proc.kill()


async def _measure(server: Server, rates: list[float], duration_s: float) -> list[RunResult]:
    host = "127.0.0.1"
    h = server.headers
    await closed_loop(host, server.port, server.path, BODY, 1.0, 202, headers=h)  # warm-up
    runs = [
        await open_loop(host, server.port, server.path, BODY, rate, duration_s, 202, headers=h)
        for rate in rates
    ]
    runs.append(await closed_loop(host, server.port, server.path, BODY, duration_s, 202, headers=h))
    return runs


async def _longpoll(port: int, redis_url: str, rate: float, duration_s: float) -> dict[str, Any]:
    """Submit at ``rate``, long-poll each job, complete it 20 ms later; time the wake-up."""
    cfg = parse_config(CONFIG)
    r = connect_async(redis_url)
    queue = AsyncQueueClient(r, dict(cfg.models))
    client = engine("127.0.0.1", port, {})
    slots = asyncio.Semaphore(256)  # connections in use, submits and polls together
    wake_ms: list[float] = []
    bad = 0

    async def one() -> None:
        nonlocal bad
        async with slots:
            status, raw = await client.send("POST", f"/v1/models/{MODEL}/jobs", BODY)
        if status != 202:
            bad += 1
            return
        job_id = json.loads(raw)["id"]
        async with slots:
            poll = asyncio.create_task(client.send("GET", f"/v1/jobs/{job_id}?wait=10"))
            await asyncio.sleep(0.02)  # the poll is waiting by now
            sent = time.perf_counter()
            await queue.complete(MODEL, [Outcome.ok(job_id, 1)])
            _, raw = await poll
            wake_ms.append((time.perf_counter() - sent) * 1000)
        if json.loads(raw).get("status") != "succeeded":
            bad += 1

    loop = asyncio.get_running_loop()
    start, n, tasks = loop.time(), int(rate * duration_s), []
    for i in range(n):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    elapsed = loop.time() - start
    await r.aclose()
    await client.aclose()
    res = RunResult(rate, n, n - bad, bad, elapsed, wake_ms)
    return {
        "jobs_per_s": rate,
        "jobs": n,
        "not_succeeded": bad,
        "p50_ms": round(res.pct(0.5), 2),
        "p99_ms": round(res.pct(0.99), 2),
        "max_ms": round(max(wake_ms), 2),
    }


def _server_wake(port: int) -> dict[str, Any]:
    """The gateway's own share of the wake-up, from its histogram (bucket upper bounds)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    buckets = []
    for line in text.splitlines():
        if line.startswith("sluice_gateway_longpoll_wake_seconds_bucket"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float(le), float(line.rsplit(" ", 1)[1])))
    total = buckets[-1][1] if buckets else 0.0

    def quantile(q: float) -> float | None:
        for le, count in buckets:
            if total and count >= q * total:
                return le * 1000
        return None

    return {"count": int(total), "p50_le_ms": quantile(0.5), "p99_le_ms": quantile(0.99)}


def _print(rows: list[dict[str, Any]], ratios: dict[str, float], lp: dict[str, Any]) -> None:
    print(
        f"{'server':<12} {'procs':>5} {'offered/s':>9} {'done/s':>8} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'errors':>6}"
    )
    for r in rows:
        offered = "max" if r["offered_rps"] is None else f"{r['offered_rps']:.0f}"
        print(
            f"{r['server']:<12} {r['processes']:>5} {offered:>9} {r['throughput_rps']:>8.0f} "
            f"{r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['errors']:>6}"
        )
    for k, v in ratios.items():
        print(f"saturation throughput {k}: {v:.2f}")
    print(
        f"long-poll wake-up (complete sent -> response) at {lp['jobs_per_s']:.0f} jobs/s: "
        f"p50 {lp['p50_ms']:.2f} ms, p99 {lp['p99_ms']:.2f} ms, max {lp['max_ms']:.2f} ms "
        f"({lp['jobs']} jobs, {lp['not_succeeded']} not succeeded)"
    )
    share = lp.get("gateway_share", {})
    print(
        f"  of which inside the gateway (notification -> answer ready, histogram bounds): "
        f"p50 <= {share.get('p50_le_ms')} ms, p99 <= {share.get('p99_le_ms')} ms"
    )


def _ratio(sat: dict[str, float], a: str, b: str) -> float:
    return round(sat[a] / sat[b], 3) if sat.get(b) else 0.0


def main(
    rates: list[float],
    duration_s: float,
    processes: list[int],
    longpoll_rate: float,
    json_path: Path | None,
    keys: bool = False,
) -> dict[str, Any]:
    redis = start_redis()
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-gw-"))
    cfg_path = tmp / "sluice.yaml"
    cfg_path.write_text(yaml.safe_dump(CONFIG))
    (tmp / "sluice-keys.yaml").write_text(yaml.safe_dump({**CONFIG, "auth": AUTH}))
    names = ("bare", "gateway", KEYED) if keys else ("bare", "gateway")
    rows: list[dict[str, Any]] = []
    lp: dict[str, Any] = {}
    try:
        for procs in processes:
            for name in names:
                server = _start(name, procs, cfg_path, redis.url)
                try:
                    for run in asyncio.run(_measure(server, rates, duration_s)):
                        rows.append({"server": name, "processes": procs, **run.row()})
                    if name == "gateway" and procs == processes[0]:
                        lp = asyncio.run(
                            _longpoll(server.port, redis.url, longpoll_rate, duration_s)
                        )
                        lp["gateway_share"] = _server_wake(server.port)
                finally:
                    _stop(server)
    finally:
        redis.stop()
    ratios: dict[str, float] = {}
    keyed: dict[str, float] = {}
    for procs in processes:
        sat = {
            r["server"]: r["throughput_rps"]
            for r in rows
            if r["processes"] == procs and r["offered_rps"] is None
        }
        ratios[f"{procs} process(es)"] = _ratio(sat, "gateway", "bare")
        if keys:
            keyed[f"{KEYED}/bare, {procs} process(es)"] = _ratio(sat, KEYED, "bare")
            keyed[f"{KEYED}/gateway, {procs} process(es)"] = _ratio(sat, KEYED, "gateway")
    result = {
        "machine": {"cpus": os.cpu_count(), "loadavg_at_end": os.getloadavg()},
        "duration_s": duration_s,
        "body_bytes": len(BODY),
        "runs": rows,
        "saturation_ratio_gateway_over_bare": ratios,
        "longpoll": lp,
        "saturation_ratio_with_keys": keyed,
    }
    _print(rows, {f"gateway/bare, {k}": v for k, v in ratios.items()} | keyed, lp)
    write_json(json_path, result)
    return result
