"""Queue-hop benchmark: submit + claim + complete with a no-op handler, vs RQ.

One run starts one private redis-server. For each batch size and worker count,
the parent submits every job first (timed alone, in chunks), then worker
processes (each with its own connection) claim and complete batches until the
queue is empty. RQ's ``enqueue`` + ``SimpleWorker`` runs on the same server in
the same run, so the ratios compare like with like on whatever machine this is.
Round trips are counted in the client's connection, commands by the server.
"""

from __future__ import annotations

import multiprocessing as mp
import platform
import queue as stdlib_queue
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import redis

from sluice import keys
from sluice.config import ModelConfig, parse_config
from sluice.errors import SluiceError
from sluice.jobs import NewJob, Outcome
from sluice.local.redis_server import start_redis
from sluice.queue import QueueClient
from sluice.queue.scripts import SCRIPT_NAMES, script_source
from sluicebench import noop
from sluicebench.redis_count import (
    CountingConnection,
    counting_client,
    read_commandstats,
    reset_commandstats,
    reset_round_trips,
)
from sluicebench.report import render, summary
from sluicebench.rq_baseline import RqResult, median_run, run_rq

MODEL = "bench"
SUBMIT_CHUNK = 256  # jobs per submit call: what a busy gateway might group
WORKER_START_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 600.0


def bench_models() -> dict[str, ModelConfig]:
    """The default three buckets, so claim ranks real bucket heads; jobs go to "32"."""
    cfg = parse_config(
        {
            "models": {
                MODEL: {
                    "handler": "synthetic",
                    "buckets": [32, 128, 512],
                    "batching": {"max_batch": 4096, "max_batch_tokens": 1_000_000},
                }
            }
        }
    )
    return dict(cfg.models)


def parse_sizes(text: str, what: str) -> list[int]:
    try:
        sizes = [int(p) for p in text.split(",") if p.strip()]
    except ValueError as e:
        raise SluiceError(f"{what} must be comma-separated integers, got {text!r}") from e
    if not sizes or any(s <= 0 for s in sizes):
        raise SluiceError(f"{what} must be positive integers, got {text!r}")
    return sizes


@dataclass(frozen=True, slots=True)
class HopResult:
    """One case: ``jobs`` jobs, batch size ``batch``, ``workers`` worker processes."""

    batch: int
    workers: int
    jobs: int
    submit_s: float
    drain_s: float
    submit_calls: int
    submit_round_trips: int
    submit_commands: int
    submit_script_us: int
    batches: int
    worker_round_trips: int
    worker_commands: int
    worker_script_us: int
    worker_calls: dict[str, int] = field(default_factory=dict)
    drain_runs: tuple[float, ...] = ()  # drain jobs/s of every repetition

    @property
    def submit_jobs_per_s(self) -> float:
        return self.jobs / self.submit_s

    @property
    def drain_jobs_per_s(self) -> float:
        return self.jobs / self.drain_s

    @property
    def hop_jobs_per_s(self) -> float:
        return self.jobs / (self.submit_s + self.drain_s)

    @property
    def round_trips_per_batch(self) -> float:
        # Includes each worker's last, empty claim: measured, not subtracted.
        return self.worker_round_trips / max(self.batches, 1)

    def to_json(self, rq: RqResult | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "batch": self.batch,
            "workers": self.workers,
            "jobs": self.jobs,
            "submit_s": round(self.submit_s, 4),
            "drain_s": round(self.drain_s, 4),
            "submit_jobs_per_s": round(self.submit_jobs_per_s, 1),
            "drain_jobs_per_s": round(self.drain_jobs_per_s, 1),
            "hop_jobs_per_s": round(self.hop_jobs_per_s, 1),
            "batches": self.batches,
            "submit_round_trips_per_call": round(self.submit_round_trips / self.submit_calls, 2),
            "worker_round_trips_per_batch": round(self.round_trips_per_batch, 3),
            "submit_commands_per_job": round(self.submit_commands / self.jobs, 2),
            "worker_commands_per_job": round(self.worker_commands / self.jobs, 2),
            "commands_per_job": round((self.submit_commands + self.worker_commands) / self.jobs, 2),
            # Server time inside the scripts (INFO commandstats usec of EVALSHA).
            "submit_script_us_per_job": round(self.submit_script_us / self.jobs, 2),
            "worker_script_us_per_job": round(self.worker_script_us / self.jobs, 2),
            "worker_script_share_of_drain": round(self.worker_script_us / 1e6 / self.drain_s, 3),
            "worker_command_calls": dict(sorted(self.worker_calls.items())),
            "drain_jobs_per_s_runs": list(self.drain_runs),
        }
        if rq is not None:
            out["drain_vs_rq_worker"] = round(self.drain_jobs_per_s / rq.worker_jobs_per_s, 1)
            out["hop_vs_rq_hop"] = round(self.hop_jobs_per_s / rq.hop_jobs_per_s, 1)
        return out


def _drain_worker(url: str, batch: int, index: int, gos: list[Any], results: Any) -> None:
    """A worker process: per repetition, claim and complete until the queue is empty."""
    r = counting_client(url)
    client = QueueClient(r, bench_models())
    worker_id = f"bench-{index}"
    r.ping()  # connect (and its handshake) before the clock starts
    results.put(("ready", index))
    for go in gos:
        go.wait()
        reset_round_trips()
        start = time.monotonic()  # CLOCK_MONOTONIC: comparable across processes
        jobs = batches = 0
        while True:
            claimed = client.claim(MODEL, worker_id, max_batch=batch)
            if not claimed.jobs:
                break
            client.complete(MODEL, [Outcome.ok(j.id, noop(j.input)) for j in claimed.jobs])
            jobs, batches = jobs + len(claimed.jobs), batches + 1
        end = time.monotonic()
        results.put(("done", index, start, end, jobs, batches, CountingConnection.round_trips))
    r.close()


def _expect(results: Any, kind: str, n: int, timeout_s: float) -> list[tuple[Any, ...]]:
    got: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n:
        try:
            msg = results.get(timeout=max(deadline - time.monotonic(), 0.01))
        except stdlib_queue.Empty:
            raise SluiceError(f"benchmark workers: {len(got)} of {n} reported {kind!r}") from None
        if msg[0] == kind:
            got.append(msg)
    return got


def _submit_all(client: QueueClient, jobs: int) -> tuple[float, int, int]:
    """Submit ``jobs`` no-op jobs in chunks; returns (seconds, calls, round trips)."""
    chunks = [
        [NewJob(input={"n": i}, bucket="32", cost=1) for i in range(s, min(s + SUBMIT_CHUNK, jobs))]
        for s in range(0, jobs, SUBMIT_CHUNK)
    ]
    reset_round_trips()
    t0 = time.perf_counter()
    for chunk in chunks:
        client.submit(MODEL, chunk)
    return time.perf_counter() - t0, len(chunks), CountingConnection.round_trips


def _one_run(
    admin: redis.Redis, submitter: redis.Redis, go: Any, results: Any, case: tuple[int, int, int]
) -> HopResult:
    """One repetition with the workers already waiting on ``go``."""
    batch, workers, jobs = case
    admin.flushall()  # scripts survive FLUSHALL; the previous run's jobs do not
    reset_commandstats(admin)
    submit_s, calls, submit_rt = _submit_all(QueueClient(submitter, bench_models()), jobs)
    submit_stats = read_commandstats(admin)
    reset_commandstats(admin)
    go.set()
    done = _expect(results, "done", workers, DRAIN_TIMEOUT_S)
    worker_stats = read_commandstats(admin)
    drained = sum(m[4] for m in done)
    succeeded = int(admin.hget(keys.stats_key(MODEL), "succeeded") or 0)
    if drained != jobs or succeeded != jobs:
        raise SluiceError(f"drained {drained} and recorded {succeeded} of {jobs} jobs")
    return HopResult(
        batch,
        workers,
        jobs,
        submit_s,
        drain_s=max(m[3] for m in done) - min(m[2] for m in done),
        submit_calls=calls,
        submit_round_trips=submit_rt,
        submit_commands=submit_stats.total_calls,
        submit_script_us=submit_stats.usec.get("evalsha", 0),
        batches=sum(m[5] for m in done),
        worker_round_trips=sum(m[6] for m in done),
        worker_commands=worker_stats.total_calls,
        worker_script_us=worker_stats.usec.get("evalsha", 0),
        worker_calls=worker_stats.calls,
    )


def run_case(url: str, batch: int, workers: int, jobs: int, repeats: int = 1) -> HopResult:
    """Submit ``jobs``, then drain them with ``workers`` processes claiming ``batch``.

    Repeated ``repeats`` times with the same processes; the run with the median
    drain rate is returned (this machine is shared, so one run can be unlucky).
    """
    ctx = mp.get_context("spawn")
    gos, results = [ctx.Event() for _ in range(repeats)], ctx.Queue()
    procs = [
        ctx.Process(target=_drain_worker, args=(url, batch, i, gos, results), daemon=True)
        for i in range(workers)
    ]
    admin = redis.Redis.from_url(url, decode_responses=True)
    submitter = counting_client(url)
    try:
        for p in procs:
            p.start()
        _expect(results, "ready", workers, WORKER_START_TIMEOUT_S)
        submitter.ping()  # its handshake is not part of submit
        runs = [_one_run(admin, submitter, go, results, (batch, workers, jobs)) for go in gos]
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
        submitter.close()
        admin.close()
    runs_per_s = tuple(round(r.drain_jobs_per_s, 1) for r in runs)
    median = sorted(runs, key=lambda r: r.drain_jobs_per_s)[len(runs) // 2]
    return replace(median, drain_runs=runs_per_s)


def _load_scripts(url: str) -> str:
    """Load every script once, so no case pays (or counts) a NOSCRIPT retry."""
    r = redis.Redis.from_url(url, decode_responses=True)
    try:
        for name in SCRIPT_NAMES:
            r.script_load(script_source(name))
        return str(r.info("server")["redis_version"])
    finally:
        r.close()


def run(
    jobs: int, rq_jobs: int, batch_sizes: list[int], workers: list[int], repeats: int = 1
) -> dict[str, Any]:
    """Run every case and the RQ baseline on one private redis-server; JSON-ready."""
    plan = [(b, w) for w in workers for b in batch_sizes]
    # RQ's runs are spread over the whole run (start, middle, end), so a busy
    # minute on this shared machine does not land on the baseline alone.
    rq_slots = [round(i * len(plan) / max(repeats - 1, 1)) for i in range(repeats)]
    rq_runs: list[RqResult] = []
    cases: list[HopResult] = []
    server = start_redis()
    try:
        version = _load_scripts(server.url)
        for k in range(len(plan) + 1):
            if rq_jobs > 0:
                rq_runs += [run_rq(server.url, rq_jobs) for _ in range(rq_slots.count(k))]
            if k < len(plan):
                cases.append(run_case(server.url, *plan[k], jobs, repeats))
    finally:
        server.stop()
    rq = median_run(rq_runs) if rq_runs else None
    return {
        "benchmark": "queue_hop",
        "env": {
            "redis_version": version,
            "python": platform.python_version(),
            "cpus": mp.cpu_count(),
            "repeats": repeats,
            "submit_chunk": SUBMIT_CHUNK,
            "buckets": bench_models()[MODEL].bucket_names,
            "job_bucket": "32",
        },
        "rq": rq.to_json() if rq else None,
        "cases": [c.to_json(rq) for c in cases],
        "summary": summary(cases, rq),
    }


def main(
    jobs: int = 10_000,
    rq_jobs: int = 1_000,
    batch_sizes: str = "1,8,32,128",
    workers: str = "1,4",
    json_path: Path | None = None,
    repeats: int = 3,
) -> dict[str, Any]:
    """``sluice bench queue``: print the table, write JSON when asked."""
    from sluice.cli_common import write_json

    if jobs <= 0 or rq_jobs < 0 or repeats <= 0:
        raise SluiceError(
            f"need jobs > 0, rq_jobs >= 0 and repeats > 0, got {jobs}, {rq_jobs}, {repeats}"
        )
    sizes, counts = parse_sizes(batch_sizes, "batch sizes"), parse_sizes(workers, "workers")
    data = run(jobs, rq_jobs, sizes, counts, repeats)
    render(data)
    write_json(json_path, data)
    return data
