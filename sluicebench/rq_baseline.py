"""The RQ 2.x baseline of the queue-hop benchmark: ``enqueue`` + ``SimpleWorker``."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import redis

from sluice.errors import SluiceError
from sluicebench import noop
from sluicebench.redis_count import (
    CountingConnection,
    counting_client,
    read_commandstats,
    reset_commandstats,
    reset_round_trips,
)

RQ_QUEUE = "sluice-bench"


@dataclass(frozen=True, slots=True)
class RqResult:
    jobs: int
    enqueue_s: float
    work_s: float
    enqueue_round_trips: int
    worker_round_trips: int
    enqueue_commands: int
    worker_commands: int
    worker_runs: tuple[float, ...] = ()  # worker jobs/s of every repetition

    @property
    def enqueue_jobs_per_s(self) -> float:
        return self.jobs / self.enqueue_s

    @property
    def worker_jobs_per_s(self) -> float:
        return self.jobs / self.work_s

    @property
    def hop_jobs_per_s(self) -> float:
        return self.jobs / (self.enqueue_s + self.work_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "enqueue_s": round(self.enqueue_s, 4),
            "work_s": round(self.work_s, 4),
            "enqueue_jobs_per_s": round(self.enqueue_jobs_per_s, 1),
            "worker_jobs_per_s": round(self.worker_jobs_per_s, 1),
            "hop_jobs_per_s": round(self.hop_jobs_per_s, 1),
            "enqueue_round_trips_per_job": round(self.enqueue_round_trips / self.jobs, 2),
            "worker_round_trips_per_job": round(self.worker_round_trips / self.jobs, 2),
            "enqueue_commands_per_job": round(self.enqueue_commands / self.jobs, 2),
            "worker_commands_per_job": round(self.worker_commands / self.jobs, 2),
            "worker_jobs_per_s_runs": list(self.worker_runs),
            "commands_per_job": round(
                (self.enqueue_commands + self.worker_commands) / self.jobs, 2
            ),
        }


def run_rq(url: str, jobs: int) -> RqResult:
    """Enqueue ``jobs`` no-op jobs one by one, then drain them with one SimpleWorker."""
    from rq import Queue, SimpleWorker

    admin = redis.Redis.from_url(url)
    conn = counting_client(url, decode=False)  # RQ stores pickles: bytes replies
    try:
        admin.flushall()
        queue = Queue(RQ_QUEUE, connection=conn)
        reset_commandstats(admin)
        reset_round_trips()
        t0 = time.perf_counter()
        for i in range(jobs):
            queue.enqueue(noop, i)
        enqueue_s = time.perf_counter() - t0
        enqueue_rt = CountingConnection.round_trips
        enqueue_cmds = read_commandstats(admin).total_calls

        worker = SimpleWorker([queue], connection=conn)
        reset_commandstats(admin)
        reset_round_trips()
        t1 = time.perf_counter()
        worker.work(burst=True, logging_level="WARNING")
        work_s = time.perf_counter() - t1
        worker_rt = CountingConnection.round_trips
        worker_cmds = read_commandstats(admin).total_calls

        finished = queue.finished_job_registry.count
        if finished != jobs or queue.count != 0:
            raise SluiceError(f"RQ baseline finished {finished} of {jobs} jobs")
    finally:
        conn.close()
        admin.close()
    return RqResult(jobs, enqueue_s, work_s, enqueue_rt, worker_rt, enqueue_cmds, worker_cmds)


def median_run(runs: list[RqResult]) -> RqResult:
    """The run with the median worker rate, carrying every run's rate."""
    rates = tuple(round(r.worker_jobs_per_s, 1) for r in runs)
    return replace(
        sorted(runs, key=lambda r: r.worker_jobs_per_s)[len(runs) // 2], worker_runs=rates
    )
