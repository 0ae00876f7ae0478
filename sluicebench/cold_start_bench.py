"""``sluice bench cold-start``: where a MiniLM worker's start goes, and a burst served
by a promoted worker against one that starts cold, on the real stack.

1. **start path**: ``sluice worker`` (the example config's MiniLM, one thread, on
   CPU) started ``repeat`` times with ``params.loader: transformers`` (before) and
   ``native`` (after), alternating; each stage as the worker measured it
   (workers/startpath.py) and the wall time from spawn to its first claim's reply.
2. **promotion**: ``sluice up`` twice on the example config, MiniLM with
   ``warm_pool.size`` 1 and then 0 (``period_s`` 2 in both): one burst of jobs that
   one worker cannot keep up with; how long the second worker took from being
   asked for to its first claim (the promoted worker's ``promote_s``; the cold
   worker's spawn to first claim), from the burst to the second worker's first job
   done, the burst's drain time, and that every job succeeded exactly once.

Table + JSON; one run compares side by side (the machine is noisy: read ratios).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from sluice import registry
from sluice.config import REDIS_URL_ENV, parse_config
from sluice.cores import THREADS_ENV
from sluice.local.redis_server import start_redis
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluicebench.e2e_served import Served, start_up
from workers.startpath import STAGES

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "sluice.yaml"
MODEL = "minilm"
SLUICE = [sys.executable, "-m", "sluice"]
WORDS = "queue worker batch model token padding latency request serving throughput".split()


def _example(**minilm_autoscaling: Any) -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text())
    auto = data["models"][MODEL]["autoscaling"]
    auto.update(minilm_autoscaling)
    return dict(data)


def _poll(pred: Any, timeout_s: float, what: str, every_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(every_s)
    raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")


# -- 1. the start path ----------------------------------------------------------------


def _one_start(qc: QueueClient, config: Path, url: str, wid: str) -> dict[str, Any]:
    env = os.environ | {"HF_HUB_OFFLINE": "1", THREADS_ENV: "1", REDIS_URL_ENV: url}
    args = [*SLUICE, "worker", "--config", str(config), "--model", MODEL, "--worker-id", wid]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [*args, "--metrics-port", "-1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def done() -> registry.WorkerInfo | None:
            live = qc.run(registry.list_workers_call(MODEL))[0]
            w = next((w for w in live if w.id == wid), None)
            path = (w.extra.get("start_path") or {}) if w else {}
            return w if "first_claim" in path else None

        info = _poll(done, 180, f"worker {wid}'s first claim")
        wall = time.monotonic() - t0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    return {"stages": info.extra["start_path"], "spawn_to_first_claim_s": round(wall, 3)}


def start_path(repeat: int) -> dict[str, Any]:
    server = start_redis()
    out: dict[str, list[dict[str, Any]]] = {"transformers": [], "native": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            configs = {}
            for loader in out:
                data = _example()
                data["models"][MODEL]["params"] = {"loader": loader}
                path = Path(tmp) / f"{loader}.yaml"
                path.write_text(yaml.safe_dump(data))
                configs[loader] = path
            qc = QueueClient(connect(server.url), dict(parse_config(data).models))
            for i in range(repeat):
                for loader, path in configs.items():
                    run = _one_start(qc, path, server.url, f"start-{loader}-{i}")
                    out[loader].append(run)
                    print(f"  {loader} #{i + 1}: {run['spawn_to_first_claim_s']:.2f} s", flush=True)
            qc.redis.close()
    finally:
        server.stop()
    return {loader: _medians(runs) for loader, runs in out.items()} | {"runs": out}


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    stages = {s: round(statistics.median(r["stages"].get(s, 0.0) for r in runs), 3) for s in STAGES}
    wall = statistics.median(r["spawn_to_first_claim_s"] for r in runs)
    return {"stages": stages, "total_s": round(sum(stages.values()), 3), "wall_s": round(wall, 3)}


# -- 2. promotion against a cold start ------------------------------------------------


def _texts(n: int) -> list[str]:
    return [
        " ".join(WORDS[(i + k) % len(WORDS)] for k in range(8 + (i * 7) % 120)) for i in range(n)
    ]


def _live(served: Served, qc: QueueClient) -> list[registry.WorkerInfo]:
    return qc.run(registry.list_workers_call(MODEL))[0]


def _parked_rss_mib(live: list[registry.WorkerInfo]) -> float | None:
    """Resident memory of a parked worker (what a pool costs while nothing happens)."""
    import psutil

    for w in live:
        if w.state == "standby":
            try:
                return round(psutil.Process(w.pid).memory_info().rss / 2**20, 1)
            except psutil.Error:
                return None
    return None


def burst(pool: int, jobs: int, log_dir: Path) -> dict[str, Any]:
    """One ``sluice up`` on a Redis of our own (its URL through SLUICE_REDIS_URL), so
    the registry's heartbeats can be read beside the HTTP API."""
    data = _example(warm_pool={"size": pool}, period_s=2)
    server = start_redis()
    old = os.environ.get(REDIS_URL_ENV)
    os.environ[REDIS_URL_ENV] = server.url
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "sluice.yaml"
            path.write_text(yaml.safe_dump(data))
            served = start_up(path, log_dir, f"cold-start-pool{pool}")
            try:
                return _drive(served, data, server.url, pool, jobs)
            finally:
                served.stop()
    finally:
        if old is None:
            os.environ.pop(REDIS_URL_ENV, None)
        else:
            os.environ[REDIS_URL_ENV] = old
        server.stop()


def _submit(http: httpx.Client, inputs: list[str]) -> None:
    """One batch, as a client should: a 503 or 429 is retried after its Retry-After
    (the gateway's worker snapshot may be a second behind /v1/models at start)."""
    deadline = time.monotonic() + 60
    while True:
        r = http.post(f"/v1/models/{MODEL}/jobs/batch", json={"inputs": inputs})
        if r.status_code == 202:
            return
        if r.status_code not in (429, 503) or time.monotonic() > deadline:
            raise RuntimeError(f"submit: {r.status_code} {r.text[:300]}")
        time.sleep(min(5.0, max(0.2, float(r.headers.get("Retry-After", "1")))))


def _drive(served: Served, data: dict[str, Any], url: str, pool: int, jobs: int) -> dict[str, Any]:
    cfg = parse_config(data)
    qc = QueueClient(connect(url), dict(cfg.models))
    try:
        if pool:
            _poll(
                lambda: any(w.state == "standby" for w in _live(served, qc)), 240, "a parked worker"
            )
        rss = _parked_rss_mib(_live(served, qc))
        first = {w.id for w in _live(served, qc) if w.state == "ready" and not w.parked}
        before = qc.stats(MODEL).counters.get("succeeded", 0)
        texts = _texts(jobs)
        t0 = time.monotonic()
        with httpx.Client(base_url=served.url, timeout=60) as http:
            for i in range(0, jobs, 200):
                _submit(http, texts[i : i + 200])

        def second() -> registry.WorkerInfo | None:
            ws = [w for w in _live(served, qc) if w.id not in first and w.state == "ready"]
            return next((w for w in ws if w.jobs > 0), None)

        w2 = _poll(second, 300, "a second worker serving")
        t_second = time.monotonic() - t0
        done = _poll(
            lambda: qc.stats(MODEL).counters.get("succeeded", 0) - before >= jobs, 600, "the burst"
        )
        t_drain = time.monotonic() - t0
        stats = qc.stats(MODEL)
        succeeded = stats.counters.get("succeeded", 0) - before
        path = w2.extra.get("start_path") or {}
        asked_to_claim = w2.extra.get("promote_s") if pool else sum(path.values())
        return {
            "pool": pool,
            "jobs": jobs,
            "second_worker": w2.id,
            "promoted": bool(pool) and "promote_s" in w2.extra,
            "asked_to_first_claim_s": round(float(asked_to_claim or 0.0), 3),
            "second_worker_start_path": path,
            "burst_to_second_worker_serving_s": round(t_second, 2),
            "burst_drain_s": round(t_drain, 2),
            "parked_rss_mib": rss,
            "succeeded": succeeded,
            "dead_lettered": stats.dead_lettered,
            "exactly_once": bool(done) and succeeded == jobs and stats.dead_lettered == 0,
        }
    finally:
        qc.redis.close()


def main(repeat: int, jobs: int, log_dir: Path, json_path: Path | None) -> dict[str, Any]:
    log_dir.mkdir(parents=True, exist_ok=True)
    print("start path (MiniLM, 1 thread, CPU):", flush=True)
    sp = start_path(repeat)
    print("promotion vs cold start (sluice up, the example config):", flush=True)
    runs = [burst(1, jobs, log_dir), burst(0, jobs, log_dir)]
    out = {"start_path": sp, "burst": runs}
    pooled, cold = runs
    out["ratios"] = {
        "start_total_native_vs_transformers": round(
            sp["native"]["total_s"] / sp["transformers"]["total_s"], 3
        ),
        "asked_to_first_claim_promoted_vs_cold": round(
            pooled["asked_to_first_claim_s"] / max(cold["asked_to_first_claim_s"], 1e-9), 4
        ),
    }
    render(out)
    return out


def render(out: dict[str, Any]) -> None:
    sp = out["start_path"]
    before, after = sp["transformers"], sp["native"]
    print(f"\n{'stage':<14} {'transformers':>13} {'native':>9}")
    for s in STAGES:
        print(f"{s:<14} {before['stages'][s]:>12.2f}s {after['stages'][s]:>8.2f}s")
    print(f"{'total':<14} {before['total_s']:>12.2f}s {after['total_s']:>8.2f}s")
    print(f"{'spawn→claim':<14} {before['wall_s']:>12.2f}s {after['wall_s']:>8.2f}s")
    print(f"\n{'run':<10} {'asked→claim':>12} {'burst→2nd serving':>18} {'drain':>8} {'once':>5}")
    for r in out["burst"]:
        name = "promoted" if r["pool"] else "cold"
        print(
            f"{name:<10} {r['asked_to_first_claim_s']:>11.3f}s "
            f"{r['burst_to_second_worker_serving_s']:>17.2f}s {r['burst_drain_s']:>7.1f}s "
            f"{'yes' if r['exactly_once'] else 'NO':>5}"
        )
    print(f"\nratios: {out['ratios']}")
