"""``sluice bench webhooks``: what completion webhooks cost the hot path, and how
fast they arrive.

In one run, on one private redis-server, side by side (ratios: the machine is noisy):

1. **Queue hop** (the protocol in-process, no HTTP): submit + claim + complete with
   a webhook on every job vs none, rounds alternating; the webhook case pays the
   job hash's extra fields and the delivery the complete script enqueues.
2. **Submit throughput through the gateway** (one process, closed loop): bodies
   with a webhook (checked by the SSRF guard, cached DNS) vs without, alternating.
3. **Submit-to-webhook latency** at a steady rate: the gateway, a notifier process,
   an instant worker and a receiver (both in this process) on loopback: from the
   submit to the signed POST's arrival, and from the job's completion to it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import yaml

from sluice.cli_common import write_json
from sluice.config import parse_config
from sluice.jobs import NewJob, Outcome, Webhook
from sluice.local.redis_server import free_port, start_redis
from sluice.queue import AsyncQueueClient, QueueClient
from sluice.queue.client import connect, connect_async
from sluicebench.gateway_loops import RunResult, closed_loop, engine
from sluicebench.ready import wait_ready

MODEL = "bench"
SECRET_ENV = "SLUICE_WEBHOOK_SECRET"
SECRET = "whsec_" + base64.b64encode(b"sluice-bench-webhook-secret-0123").decode()
TEXT = "the quick brown fox jumps over the lazy dog"


def config() -> dict[str, Any]:
    return {
        "models": {
            MODEL: {
                "handler": "synthetic",
                "cost": {"method": "words"},
                "queue": {"max_queued_jobs": 10_000_000, "max_queued_cost": 1_000_000_000},
                "autoscaling": {"min_replicas": 0},
            }
        },
        "webhooks": {
            "secret_env": SECRET_ENV,
            "allow_networks": ["127.0.0.1/32"],
            "allow_http": True,
            "metrics_port": 0,
        },
    }


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 2)


# -- 1. the queue hop, in-process --------------------------------------------------
def _hop_once(q: QueueClient, jobs: int, hook: Webhook | None) -> float:
    q.redis.flushdb()
    start = time.perf_counter()
    for i in range(0, jobs, 256):
        chunk = [NewJob(TEXT, "32", 9, webhook=hook) for _ in range(min(256, jobs - i))]
        q.submit(MODEL, chunk)
    done = 0
    while done < jobs:
        batch = q.claim(MODEL, "w1", max_batch=32)
        if not batch.jobs:
            break
        q.complete(MODEL, [Outcome.ok(j.id, 1) for j in batch.jobs], "w1")
        done += len(batch.jobs)
    return jobs / (time.perf_counter() - start)


def queue_hop(redis_url: str, jobs: int, rounds: int, url: str) -> dict[str, Any]:
    cfg = parse_config(config())
    q = QueueClient(connect(redis_url), dict(cfg.models))
    plain: list[float] = []
    hooked: list[float] = []
    try:
        _hop_once(q, min(jobs, 1000), None)  # warm-up: scripts loaded, connections open
        for i in range(rounds):  # ABBA: the second of a pair runs on a used server
            for hook in (None, Webhook(url)) if i % 2 == 0 else (Webhook(url), None):
                (plain if hook is None else hooked).append(_hop_once(q, jobs, hook))
    finally:
        q.redis.flushdb()
        q.redis.close()
    p, h = statistics.median(plain), statistics.median(hooked)
    return {
        "jobs": jobs,
        "rounds": rounds,
        "plain_jobs_per_s": [round(x) for x in plain],
        "webhook_jobs_per_s": [round(x) for x in hooked],
        "ratio_webhook_over_plain": round(h / p, 3),
    }


# -- processes -----------------------------------------------------------------------
def _spawn(args: list[str], cfg_path: Path, redis_url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SLUICE_REDIS_URL": redis_url, SECRET_ENV: SECRET}
    cmd = [sys.executable, "-c", "from sluice.cli import main; main()", *args]
    return subprocess.Popen([*cmd, "--config", str(cfg_path)], env=env)


def _gateway(cfg_path: Path, redis_url: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = _spawn(["gateway", "--port", str(port)], cfg_path, redis_url)
    if wait_ready(f"http://127.0.0.1:{port}/readyz", 60):
        return proc, port
    proc.terminate()
    raise RuntimeError("the gateway did not start")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- 2. submit throughput ------------------------------------------------------------
async def _submits(port: int, duration_s: float, rounds: int, url: str) -> dict[str, Any]:
    path = f"/v1/models/{MODEL}/jobs"
    plain_body = json.dumps({"input": TEXT}).encode()
    hook_body = json.dumps({"input": TEXT, "webhook": {"url": url}}).encode()
    await closed_loop("127.0.0.1", port, path, hook_body, 1.0, 202)  # warm-up
    plain: list[RunResult] = []
    hooked: list[RunResult] = []
    for i in range(rounds):  # ABBA, as in the queue hop
        for body in (plain_body, hook_body) if i % 2 == 0 else (hook_body, plain_body):
            run = await closed_loop("127.0.0.1", port, path, body, duration_s, 202)
            (plain if body is plain_body else hooked).append(run)
    p = statistics.median(r.throughput for r in plain)
    h = statistics.median(r.throughput for r in hooked)
    return {
        "duration_s": duration_s,
        "rounds": rounds,
        "plain_rps": [round(r.throughput) for r in plain],
        "webhook_rps": [round(r.throughput) for r in hooked],
        "plain_p50_ms": _pct([x for r in plain for x in r.latencies_ms], 0.5),
        "webhook_p50_ms": _pct([x for r in hooked for x in r.latencies_ms], 0.5),
        "errors": sum(r.errors for r in plain + hooked),
        "ratio_webhook_over_plain": round(h / p, 3) if p else 0.0,
    }


# -- 3. submit to webhook ------------------------------------------------------------
class _Receiver:
    """A minimal HTTP/1.1 server: records when each webhook-id arrives, answers 204."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                headers = {}
                for line in head.decode("latin-1").split("\r\n")[1:]:
                    k, _, v = line.partition(":")
                    headers[k.strip().lower()] = v.strip()
                await reader.readexactly(int(headers.get("content-length", "0")))
                self.arrived.setdefault(headers.get("webhook-id", ""), time.time())
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def _latency(
    port: int, redis_url: str, rx: _Receiver, rate: float, duration_s: float
) -> dict[str, Any]:
    cfg = parse_config(config())
    r = connect_async(redis_url)
    queue = AsyncQueueClient(r, dict(cfg.models))
    client = engine("127.0.0.1", port, {})
    body = json.dumps({"input": TEXT, "webhook": {"url": f"http://127.0.0.1:{rx.port}/hook"}})
    submitted: dict[str, float] = {}
    completed: dict[str, float] = {}
    errors = 0
    stop = asyncio.Event()

    async def worker() -> None:  # claims and completes at once: the hop, not a model
        # every measured job, by id: the warm-up job is in completed, not in submitted
        while not stop.is_set() or any(j not in completed for j in submitted):
            batch = await queue.claim(MODEL, "bench-worker", max_batch=32)
            if not batch.jobs:
                await queue.wait_for_work(MODEL, 0.05)
                continue
            await queue.complete(MODEL, [Outcome.ok(j.id, 1) for j in batch.jobs], "bench-worker")
            now = time.time()
            for j in batch.jobs:
                completed[j.id] = now

    async def one() -> None:
        nonlocal errors
        t0 = time.time()
        status, raw = await client.send("POST", f"/v1/models/{MODEL}/jobs", body.encode())
        if status != 202:
            errors += 1
            return
        submitted[json.loads(raw)["id"]] = t0

    w = asyncio.create_task(worker())
    # Warm-up: the notifier is up (imports, connections) before the measured load.
    await one()
    await _until_delivered(rx, [next(iter(submitted))], 60)
    submitted.clear()
    await _paced(one, rate, duration_s)
    stop.set()
    await _until_delivered(rx, list(submitted), 30)
    await asyncio.wait_for(w, 30)
    await client.aclose()
    await r.aclose()
    return _figures(rx, submitted, completed, errors, rate, duration_s)


async def _paced(
    send: Callable[[], Coroutine[Any, Any, None]], rate: float, duration_s: float
) -> None:
    """``rate x duration_s`` sends, each at its scheduled time (an open loop)."""
    loop = asyncio.get_running_loop()
    start, n, tasks = loop.time(), int(rate * duration_s), []
    for i in range(n):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send()))
    await asyncio.gather(*tasks)


async def _until_delivered(rx: _Receiver, job_ids: list[str], timeout_s: float) -> None:
    """Until every job's webhook reached the receiver, or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(f"msg_{j}" in rx.arrived for j in job_ids):
            return
        await asyncio.sleep(0.05)


def _figures(
    rx: _Receiver,
    submitted: dict[str, float],
    completed: dict[str, float],
    errors: int,
    rate: float,
    duration_s: float,
) -> dict[str, Any]:
    """Submit-to-webhook and complete-to-webhook times of the delivered jobs."""
    e2e = [
        (rx.arrived[f"msg_{j}"] - t) * 1000
        for j, t in submitted.items()
        if f"msg_{j}" in rx.arrived
    ]
    hop = [
        (rx.arrived[f"msg_{j}"] - completed[j]) * 1000
        for j in submitted
        if f"msg_{j}" in rx.arrived and j in completed
    ]
    return {
        "jobs_per_s": rate,
        "duration_s": duration_s,
        "submitted": len(submitted),
        "submit_errors": errors,
        "delivered": len(e2e),
        "submit_to_webhook_ms": {
            "p50": _pct(e2e, 0.5),
            "p99": _pct(e2e, 0.99),
            "max": _pct(e2e, 1.0),
        },
        "complete_to_webhook_ms": {
            "p50": _pct(hop, 0.5),
            "p99": _pct(hop, 0.99),
            "max": _pct(hop, 1.0),
        },
    }


async def _with_receiver(
    redis_url: str, cfg_path: Path, gw_port: int, rate: float, duration_s: float
) -> dict[str, Any]:
    rx = _Receiver()
    await rx.start()
    notifier = _spawn(["notifier"], cfg_path, redis_url)
    try:
        return await _latency(gw_port, redis_url, rx, rate, duration_s)
    finally:
        await asyncio.to_thread(_stop, notifier)
        await rx.stop()


async def _drain_rate(redis_url: str, cfg_path: Path, backlog: int) -> dict[str, Any]:
    """One notifier process against a backlog of ended jobs' deliveries: how many it
    sends a second (receiver in this process, answering 204 at once)."""
    rx = _Receiver()
    await rx.start()
    cfg = parse_config(config())
    q = QueueClient(connect(redis_url), dict(cfg.models))
    hook = Webhook(f"http://127.0.0.1:{rx.port}/hook")
    q.redis.flushdb()
    for i in range(0, backlog, 256):
        q.submit(MODEL, [NewJob(TEXT, "32", 9, webhook=hook) for _ in range(min(256, backlog - i))])
    while True:
        batch = q.claim(MODEL, "w1", max_batch=64)
        if not batch.jobs:
            break
        q.complete(MODEL, [Outcome.ok(j.id, [0.1] * 16) for j in batch.jobs], "w1")
    q.redis.close()
    start = time.monotonic()
    notifier = _spawn(["notifier"], cfg_path, redis_url)
    try:
        first: float | None = None
        deadline = time.monotonic() + 600
        while len(rx.arrived) < backlog and time.monotonic() < deadline:
            if first is None and rx.arrived:
                first = time.monotonic()
            await asyncio.sleep(0.02)
        end = time.monotonic()
    finally:
        await asyncio.to_thread(_stop, notifier)
        await rx.stop()
    sending_s = end - (first or start)
    return {
        "backlog": backlog,
        "delivered": len(rx.arrived),
        "seconds_from_first_delivery": round(sending_s, 2),
        "deliveries_per_s": round(len(rx.arrived) / sending_s, 1) if sending_s else None,
        "start_to_first_s": round((first or end) - start, 2),
    }


def main(
    hop_jobs: int,
    rounds: int,
    duration_s: float,
    rate: float,
    json_path: Path | None,
    backlog: int = 2000,
) -> dict[str, Any]:
    redis = start_redis()
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-webhooks-"))
    cfg_path = tmp / "sluice.yaml"
    cfg_path.write_text(yaml.safe_dump(config()))
    url = "http://127.0.0.1:9/hook"  # never called in parts 1 and 2: no notifier runs
    try:
        hop = queue_hop(redis.url, hop_jobs, rounds, url)
        gw, port = _gateway(cfg_path, redis.url)
        try:
            submits = asyncio.run(_submits(port, duration_s, rounds, url))
            connect(redis.url).flushdb()
            latency = asyncio.run(_with_receiver(redis.url, cfg_path, port, rate, duration_s))
        finally:
            _stop(gw)
        drain = asyncio.run(_drain_rate(redis.url, cfg_path, backlog))
    finally:
        redis.stop()
    result = {
        "machine": {"cpus": os.cpu_count(), "loadavg_at_end": os.getloadavg()},
        "queue_hop": hop,
        "gateway_submit": submits,
        "delivery": latency,
        "notifier_drain": drain,
    }
    _print(result)
    write_json(json_path, result)
    return result


def _print(res: dict[str, Any]) -> None:
    hop, sub, lat = res["queue_hop"], res["gateway_submit"], res["delivery"]
    print(f"{'measure':<44} {'no webhook':>12} {'webhook':>12} {'ratio':>7}")
    print(
        f"{'queue hop jobs/s (median of ' + str(hop['rounds']) + ')':<44} "
        f"{statistics.median(hop['plain_jobs_per_s']):>12.0f} "
        f"{statistics.median(hop['webhook_jobs_per_s']):>12.0f} "
        f"{hop['ratio_webhook_over_plain']:>7.3f}"
    )
    print(
        f"{'gateway submit req/s (median of ' + str(sub['rounds']) + ')':<44} "
        f"{statistics.median(sub['plain_rps']):>12.0f} "
        f"{statistics.median(sub['webhook_rps']):>12.0f} "
        f"{sub['ratio_webhook_over_plain']:>7.3f}"
    )
    d = res["notifier_drain"]
    print(
        f"one notifier process, a backlog of {d['backlog']}: {d['deliveries_per_s']} "
        f"deliveries/s ({d['delivered']} delivered, first after {d['start_to_first_s']} s)"
    )
    e2e, hop_ms = lat["submit_to_webhook_ms"], lat["complete_to_webhook_ms"]
    print(
        f"webhook latency at {lat['jobs_per_s']:.0f} jobs/s ({lat['delivered']} of "
        f"{lat['submitted']} delivered): submit -> webhook p50 {e2e['p50']} ms, "
        f"p99 {e2e['p99']} ms; "
        f"complete -> webhook p50 {hop_ms['p50']} ms, p99 {hop_ms['p99']} ms"
    )
