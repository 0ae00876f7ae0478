"""Helpers for worker tests: configs, in-thread workers, job submission."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from sluice.config import SluiceConfig, parse_config
from sluice.cost import CostEstimator
from sluice.jobs import NewJob
from sluice.local.children import Children
from sluice.queue import QueueClient
from sluice.queue.client import connect
from workers.handlers import HandlerContext, make_handler
from workers.worker import Worker, WorkerOptions

MODEL = "m"
SLUICE = [sys.executable, "-c", "from sluice.cli import main; main()"]


def worker_config(
    handler: str = "tiny",
    params: dict[str, Any] | None = None,
    batching: dict[str, Any] | None = None,
    worker: dict[str, Any] | None = None,
    buckets: list[int] | None = None,
) -> SluiceConfig:
    model: dict[str, Any] = {
        "handler": handler,
        "params": params or {},
        "buckets": buckets or [32, 128, 512],
        "cost": {"method": "words"},
        "batching": {"max_batch": 8, "max_batch_tokens": 4096, "lease_s": 5, **(batching or {})},
    }
    return parse_config(
        {
            "models": {MODEL: model},
            "worker": {"heartbeat_s": 0.2, "quarantine_grace_s": 0.3, **(worker or {})},
        }
    )


def submit(qc: QueueClient, cfg: SluiceConfig, texts: list[Any], model: str = MODEL) -> list[str]:
    est = CostEstimator(cfg.model(model))
    jobs = []
    for t in texts:
        e = est.estimate(t)
        jobs.append(NewJob(t, e.bucket, e.cost))
    return [s.id for s in qc.submit(model, jobs)]


@dataclass
class Running:
    """A worker running in a thread of the test process; ``code`` is what its run
    returned. ``started`` starts one, ``stop_all`` drains and closes them."""

    worker: Worker
    thread: threading.Thread = field(default_factory=threading.Thread)
    code: int | None = None

    @classmethod
    def started(cls, worker: Any, running: list[Any]) -> Any:
        run = cls(worker)

        def target() -> None:
            run.code = run.worker.run()

        run.thread = threading.Thread(target=target, daemon=True)
        run.thread.start()
        running.append(run)
        return run

    def join(self, timeout_s: float = 20.0) -> int:
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "worker did not exit"
        assert self.code is not None
        return self.code


def stop_all(running: list[Running]) -> None:
    """Drain every worker, then join each and close its connections now, not whenever
    the collector finds them (an unclosed socket found at exit is an error under
    filterwarnings = error)."""
    for run in running:
        run.worker.drain("test teardown")
    for run in running:
        run.thread.join(10)
        run.worker.client.redis.close()


@pytest.fixture
def start_worker(redis_url: str) -> Iterator[Callable[..., Running]]:
    """``start_worker(cfg, **WorkerOptions fields) -> Running`` (a thread); drained at teardown."""
    running: list[Running] = []

    def start(cfg: SluiceConfig, **opts: Any) -> Running:
        opts.setdefault("metrics_port", -1)
        redis_timeout_s = opts.pop("redis_timeout_s", 5.0)  # caps the idle wait at half
        wopts = WorkerOptions(model=opts.pop("model", MODEL), **opts)
        handler = make_handler(HandlerContext(wopts.model, cfg.model(wopts.model)))
        client = QueueClient(connect(redis_url, redis_timeout_s), dict(cfg.models))
        return Running.started(Worker(cfg, client, handler, wopts), running)

    yield start
    stop_all(running)


# Texts of mixed lengths and the cosine between embeddings, for the tests that
# check one embedding path against another (workers, dtype, GPU).
WORDS = (
    "queue worker batch model token padding latency gpu request the a of to and "
    "serving throughput bucket scale replica embedding sentence"
).split()


def mixed_texts(n: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    lengths = [rng.choice((2, 5, 12, 20, 45, 80, 150, 290)) for _ in range(n)]
    return [" ".join(rng.choice(WORDS) for _ in range(k)) for k in lengths]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture
def spawn(tmp_path: Path, redis_url: str) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """``spawn(cfg, *extra) -> Popen``: ``sluice worker`` for model ``m`` through
    sluice.local.children (output in ``tmp_path/logs/worker-<n>.log``); whatever
    still runs at teardown is stopped, then killed."""
    children = Children(tmp_path / "logs")

    def start(cfg: SluiceConfig, *extra: str) -> subprocess.Popen[bytes]:
        n = len(children.all)
        path = tmp_path / f"sluice-{n}.yaml"
        path.write_text(yaml.safe_dump(cfg.model_dump(mode="json", exclude_none=True)))
        args = ["worker", "-c", str(path), "-m", MODEL, "--redis-url", redis_url, *extra]
        return children.spawn(f"worker-{n}", args).proc

    yield start
    children.stop(children.all, timeout_s=0)
