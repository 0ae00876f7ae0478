"""``sluice bench cost``: what one job costs, per route and worker batch size.

On loopback, one private redis-server, one gateway process and one stand-in
worker (sluicebench/cost_procs.py: claims up to B jobs, answers each with a
384-float embedding, completes them; no model runs). A closed loop of HTTP
clients drives one route at a time:

- ``submit_poll``: POST /v1/models/{m}/jobs, then GET /v1/jobs/{id}?wait=30
- ``predict``: POST /v1/models/{m}/predict
- ``embeddings``: POST /v1/embeddings (one input)
- ``batch``: POST /v1/models/{m}/jobs/batch with 32 inputs, then one long-poll
  on the last job

Per route and batch size, divided by the jobs that ended: the gateway's CPU
(its process's user + system time, psutil), Redis's CPU (``INFO cpu``, the
server's own user + system time, network syscalls included), the worker's CPU,
Redis commands (``INFO commandstats``, commands inside scripts included) and
round trips (counted in the gateway's and the worker's connections). Then a
second, profiled pass per route (cProfile in the gateway, started and read by
signal; its overhead is why CPU is measured in the first pass only).

With ``--other CHECKOUT`` the gateway and worker of another checkout (e.g.
``git worktree add /work/wt-cost-base main``) run the same phases in the same
run, in ABBA order; the load generator is this checkout's.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import redis
import yaml

from sluice.local.redis_server import free_port, start_redis
from sluicebench.cost_procs import MODEL, STATS_ENV
from sluicebench.loadgen.http import EngineError, LeanEngine
from sluicebench.ready import wait_ready

PROCS = Path(__file__).resolve().with_name("cost_procs.py")
ROUTES = ("submit_poll", "predict", "embeddings", "batch")
TEXT = "the quick brown fox jumps over the lazy dog while the sluice gates hold"
BATCH_INPUTS = 32  # inputs per POST .../jobs/batch
DIM = 384  # all-MiniLM-L6-v2's embedding size: the result's bytes are a real one's
CONFIG: dict[str, Any] = {
    "models": {
        MODEL: {
            "handler": "synthetic",
            "params": {"embedding_dim": DIM},
            "cost": {"method": "words"},
            "queue": {"max_queued_jobs": 10_000_000, "max_queued_cost": 1_000_000_000},
            "autoscaling": {"min_replicas": 0},
        }
    },
}


@dataclass
class Proc:
    proc: subprocess.Popen[bytes]
    stats_path: Path

    def ready(self, timeout_s: float = 60.0) -> None:
        """Wait until its SIGUSR1 handler is in place (before it, the signal kills)."""
        deadline = time.monotonic() + timeout_s
        while not self.stats_path.exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"process {self.proc.pid} did not get ready")
            time.sleep(0.05)

    def snapshot(self) -> dict[str, Any]:
        """CPU seconds so far, and the counters the process writes on SIGUSR1."""
        self.ready()
        before = _read(self.stats_path).get("seq", 0)
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            got = _read(self.stats_path)
            if got.get("seq", 0) > before:
                t = psutil.Process(self.proc.pid).cpu_times()
                return {**got, "cpu_s": t.user + t.system}
            time.sleep(0.01)
        raise RuntimeError(f"process {self.proc.pid} wrote no counters")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _read(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def _spawn(checkout: Path, args: list[str], stats: Path) -> Proc:
    env = {**os.environ, "PYTHONPATH": str(checkout), STATS_ENV: str(stats), "HF_HUB_OFFLINE": "1"}
    stats.unlink(missing_ok=True)  # a new process: ready once it writes its own
    return Proc(subprocess.Popen([sys.executable, str(PROCS), *args], env=env, cwd=checkout), stats)


def _start_gateway(
    checkout: Path, url: str, tmp: Path, config: dict[str, Any] | None = None
) -> tuple[Proc, int]:
    cfg = tmp / "sluice.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG if config is None else config))
    port = free_port()
    args = ["gateway", "--config", str(cfg), "--redis-url", url, "--port", str(port)]
    gw = _spawn(checkout, args, tmp / "gateway.json")
    if wait_ready(f"http://127.0.0.1:{port}/healthz", 60):
        return gw, port
    gw.stop()
    raise RuntimeError(f"the gateway of {checkout} did not start")


async def _sender(client: LeanEngine, route: str, stop: float, counts: dict[str, int]) -> None:
    loop = asyncio.get_running_loop()
    one = json.dumps({"input": TEXT}).encode()
    many = json.dumps({"inputs": [TEXT] * BATCH_INPUTS}).encode()
    emb = json.dumps({"model": MODEL, "input": TEXT}).encode()
    while loop.time() < stop:
        try:
            if route == "predict":
                status, _ = await client.send("POST", f"/v1/models/{MODEL}/predict", one)
                n = 1
            elif route == "embeddings":
                status, _ = await client.send("POST", "/v1/embeddings", emb)
                n = 1
            else:
                path, body = (f"/v1/models/{MODEL}/jobs", one)
                if route == "batch":
                    path, body = (f"{path}/batch", many)
                status, raw = await client.send("POST", path, body)
                if status != 202:
                    counts["errors"] += 1
                    continue
                reply = json.loads(raw)
                last = reply["jobs"][-1]["id"] if route == "batch" else reply["id"]
                status, _ = await client.send("GET", f"/v1/jobs/{last}?wait=30")
                n = BATCH_INPUTS if route == "batch" else 1
        except EngineError:
            counts["errors"] += 1
            continue
        if status == 200:
            counts["requests"] += 1
            counts["jobs"] += n
        else:
            counts["errors"] += 1


async def _drive(port: int, route: str, seconds: float, concurrency: int) -> dict[str, int]:
    client = LeanEngine(f"http://127.0.0.1:{port}", None, headers={})
    counts = {"requests": 0, "jobs": 0, "errors": 0}
    n = max(concurrency // 8, 1) if route == "batch" else concurrency
    stop = asyncio.get_running_loop().time() + seconds
    await asyncio.gather(*(_sender(client, route, stop, counts) for _ in range(n)))
    await client.aclose()
    return counts


def _redis_counters(r: redis.Redis) -> dict[str, Any]:
    cpu = r.info("cpu")
    calls = script_usec = 0
    per: dict[str, int] = {}
    usec: dict[str, int] = {}
    for name, entry in r.info("commandstats").items():
        cmd = str(name).removeprefix("cmdstat_")
        if cmd in ("info", "config|resetstat", "config"):
            continue
        calls += int(entry["calls"])
        per[cmd] = int(entry["calls"])
        usec[cmd] = int(entry["usec"])
        if cmd in ("evalsha", "eval"):
            script_usec += int(entry["usec"])
    return {
        "cpu_s": float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
        "calls": calls,
        "script_us": script_usec,
        "per": per,
        "usec": usec,
    }


def _snap(gw: Proc, wk: Proc, r: redis.Redis) -> dict[str, Any]:
    return {"gw": gw.snapshot(), "wk": wk.snapshot(), "r": _redis_counters(r)}


def _rates(a: dict[str, Any], b: dict[str, Any], wall: float) -> dict[str, float]:
    """Per second between two snapshots: the idle floor a loaded phase subtracts."""
    return {
        "gateway_cpu_s": (b["gw"]["cpu_s"] - a["gw"]["cpu_s"]) / wall,
        "worker_cpu_s": (b["wk"]["cpu_s"] - a["wk"]["cpu_s"]) / wall,
        "redis_cpu_s": (b["r"]["cpu_s"] - a["r"]["cpu_s"]) / wall,
        "redis_calls": (b["r"]["calls"] - a["r"]["calls"]) / wall,
    }


def idle_rates(gw: Proc, wk: Proc, r: redis.Redis, seconds: float) -> dict[str, float]:
    """What the stack spends with no load (heartbeats, polls, the snapshots themselves)."""
    a = _snap(gw, wk, r)
    t0 = time.perf_counter()
    time.sleep(seconds)
    b = _snap(gw, wk, r)
    return _rates(a, b, time.perf_counter() - t0)


def _less(b: Any, a: Any) -> Any:
    """``b - a`` for two snapshots (numbers and dicts of numbers, field by field)."""
    if isinstance(b, dict):
        return {k: _less(v, a.get(k, 0) if isinstance(a, dict) else 0) for k, v in b.items()}
    return b - a if isinstance(b, int | float) else b


def _plus(x: Any, y: Any) -> Any:
    """``x + y`` for two moves of :func:`_less`, a key one of them lacks read as 0."""
    if isinstance(x, dict) or isinstance(y, dict):
        x, y = (x if isinstance(x, dict) else {}), (y if isinstance(y, dict) else {})
        return {k: _plus(x.get(k, 0), y.get(k, 0)) for k in {*x, *y}}
    return x + y


def _slice(
    gw: Proc, wk: Proc, r: redis.Redis, port: int, route: str, seconds: float, clients: int
) -> tuple[dict[str, Any], dict[str, int], float]:
    """One stretch of one route: what every counter moved, the requests, the wall time."""
    a = _snap(gw, wk, r)
    t0 = time.perf_counter()
    counts = asyncio.run(_drive(port, route, seconds, clients))
    wall = time.perf_counter() - t0
    return _less(_snap(gw, wk, r), a), counts, wall


def _phases(
    gw: Proc, wk: Proc, r: redis.Redis, port: int, opts: dict[str, Any]
) -> list[dict[str, Any]]:
    """Every route, each warmed up, then measured in ``opts["slices"]`` stretches taken
    in turn (route A, B, A, B, ...): a load that drifts over the run falls on every
    route alike, so routes compare like for like. Each figure is divided by the jobs
    that ended in the route's stretches, less the idle floor (``opts["idle"]``, per
    second) over their wall time."""
    routes, n = opts["routes"], max(int(opts.get("slices", 1)), 1)
    taken: dict[str, list[Any]] = {route: [] for route in routes}
    for route in routes:
        asyncio.run(_drive(port, route, 1.0, opts["concurrency"]))  # warm-up
        if n == 1:  # each route measured right after its warm-up, as before slices
            taken[route].append(
                _slice(gw, wk, r, port, route, opts["seconds"], opts["concurrency"])
            )
    for _ in range(n if n > 1 else 0):
        for route in routes:
            taken[route].append(
                _slice(gw, wk, r, port, route, opts["seconds"] / n, opts["concurrency"])
            )
    rows = []
    for route, parts in taken.items():
        moved, counts, wall = parts[0]
        for d, c, w in parts[1:]:
            moved, counts, wall = _plus(moved, d), _plus(counts, c), wall + w
        rows.append(_row(route, moved, counts, wall, opts["idle"]))
    return rows


def _row(
    route: str, moved: dict[str, Any], counts: dict[str, int], wall: float, idle: dict[str, float]
) -> dict[str, Any]:
    a, b = _less(moved, moved), moved  # the counters' moves, from zero
    busy = _rates(a, b, wall)
    per_s = max(counts["jobs"], 1) / wall  # jobs/s: a rate over a rate is per job
    g0, g1, w0, w1, r0, r1 = a["gw"], b["gw"], a["wk"], b["wk"], a["r"], b["r"]
    jobs = max(counts["jobs"], 1)
    batches = max(w1["batches"] - w0["batches"], 1)
    return {
        "route": route,
        **counts,
        "seconds": round(wall, 2),
        "jobs_per_s": round(counts["jobs"] / wall, 1),
        "requests_per_s": round(counts["requests"] / wall, 1),
        "mean_batch": round((w1["jobs"] - w0["jobs"]) / batches, 1),
        "gateway_cores": round(busy["gateway_cpu_s"], 3),
        "redis_cores": round(busy["redis_cpu_s"], 3),
        "gateway_cpu_ms_per_job": round(
            (busy["gateway_cpu_s"] - idle["gateway_cpu_s"]) * 1e3 / per_s, 4
        ),
        "worker_cpu_ms_per_job": round(
            (busy["worker_cpu_s"] - idle["worker_cpu_s"]) * 1e3 / per_s, 4
        ),
        "redis_cpu_us_per_job": round((busy["redis_cpu_s"] - idle["redis_cpu_s"]) * 1e6 / per_s, 2),
        "redis_commands_per_job": round((busy["redis_calls"] - idle["redis_calls"]) / per_s, 2),
        "redis_script_us_per_job": round((r1["script_us"] - r0["script_us"]) / jobs, 2),
        "gateway_round_trips_per_job": round((g1["round_trips"] - g0["round_trips"]) / jobs, 3),
        "worker_round_trips_per_job": round((w1["round_trips"] - w0["round_trips"]) / jobs, 3),
        "redis_calls_per_job": {
            k: round((v - r0["per"].get(k, 0)) / jobs, 3)
            for k, v in sorted(r1["per"].items())
            if v > r0["per"].get(k, 0)
        },
        # Redis's own timing of each command (a script's includes its commands'): wall
        # time inside Redis, so inflated when the machine preempts it (ADR 0161).
        "redis_usec_per_job": {
            k: round((v - r0["usec"].get(k, 0)) / jobs, 2)
            for k, v in sorted(r1["usec"].items())
            if v > r0["usec"].get(k, 0)
        },
    }


def _profile(gw: Proc, port: int, route: str, opts: dict[str, Any]) -> dict[str, Any]:
    gw.proc.send_signal(signal.SIGUSR2)
    asyncio.run(_drive(port, route, opts["profile_seconds"], opts["concurrency"]))
    return dict(gw.snapshot().get("profile", {}))


def measure_checkout(checkout: Path, opts: dict[str, Any]) -> dict[str, Any]:
    """Every route at every batch size, then the profiles, on a fresh Redis and gateway."""
    server = start_redis()
    r = redis.Redis.from_url(server.url, decode_responses=True)
    tmp = Path(tempfile.mkdtemp(prefix="sluice-cost-"))
    gw, port = _start_gateway(checkout, server.url, tmp)
    phases: list[dict[str, Any]] = []
    profiles: dict[str, Any] = {}
    try:
        for batch in opts["batch_sizes"]:
            wk = _spawn(checkout, ["worker", server.url, str(batch), str(DIM)], tmp / "w.json")
            try:
                asyncio.run(_drive(port, opts["routes"][0], 1.0, 4))  # connections, imports
                idle = idle_rates(gw, wk, r, opts["idle_seconds"])
                for row in _phases(gw, wk, r, port, {**opts, "idle": idle}):
                    phases.append({"batch": batch, "idle_per_s": idle, **row})
                if opts["profile_seconds"] > 0 and batch == opts["batch_sizes"][-1]:
                    profiles = {route: _profile(gw, port, route, opts) for route in opts["routes"]}
            finally:
                wk.stop()
    finally:
        gw.stop()
        r.close()
        server.stop()
    return {"checkout": str(checkout), "phases": phases, "profiles": profiles}


def run(opts: dict[str, Any], other: Path | None) -> dict[str, Any]:
    """This checkout alone, or ABBA against ``other`` (other, this, this, other)."""
    from sluicebench.cost_report import combine, project, targets

    here = Path(__file__).resolve().parent.parent
    order = [("other", other), ("this", here), ("this", here), ("other", other)]
    plan = [(n, c) for n, c in order if c is not None][: 4 if other else 1]
    runs: dict[str, list[dict[str, Any]]] = {}
    for name, checkout in plan:
        runs.setdefault(name, []).append(measure_checkout(checkout.resolve(), opts))
    data: dict[str, Any] = {"benchmark": "cost", "options": opts, "cpus": os.cpu_count()}
    for name, rs in runs.items():
        rows = combine(rs)
        data[name] = {
            "checkout": rs[0]["checkout"],
            "rows": rows,
            "targets": targets(rows),
            "projection": project(rows),
            "profiles": rs[-1]["profiles"],
            "runs": rs,
        }
    return data


def main(
    routes: str,
    batch_sizes: str,
    seconds: float,
    concurrency: int,
    profile_seconds: float,
    other: Path | None,
    json_path: Path | None,
    idle_seconds: float = 3.0,
    slices: int = 4,
) -> dict[str, Any]:
    from sluice.cli_common import write_json
    from sluice.errors import SluiceError
    from sluicebench.cost_report import render
    from sluicebench.queue_hop import parse_sizes

    chosen = [r.strip() for r in routes.split(",") if r.strip()]
    if not chosen or any(r not in ROUTES for r in chosen):
        raise SluiceError(f"routes must be some of {', '.join(ROUTES)}, got {routes!r}")
    if seconds <= 0 or concurrency <= 0 or profile_seconds < 0 or slices < 1:
        raise SluiceError("need seconds > 0, concurrency > 0, profile seconds >= 0 and slices >= 1")
    opts = {
        "routes": chosen,
        "batch_sizes": parse_sizes(batch_sizes, "batch sizes"),
        "seconds": seconds,
        "concurrency": concurrency,
        "profile_seconds": profile_seconds,
        "idle_seconds": idle_seconds,
        "slices": slices,
        "batch_inputs": BATCH_INPUTS,
        "embedding_dim": DIM,
    }
    data = run(opts, other)
    render(data)
    write_json(json_path, data)
    return data
