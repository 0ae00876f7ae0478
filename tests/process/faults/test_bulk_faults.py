"""Bulk coordinators under faults, on real processes: a bulk worker killed outright
(a pod lost) and a coordinator hung (SIGSTOP) then woken. Every line ends up in the
output once, and no line runs twice.

The redis-server and the gateway are the module's (tests/kit/faults.py's
SharedGateway); each test flushes Redis and starts its own model worker and bulk
workers."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from sluice.client import Client
from tests.kit.faults import (
    MODEL,
    Proc,
    SharedGateway,
    Stack,
    fault_config,
    fresh_stack,
    shared_gateway,
)
from tests.kit.http import HTTP
from tests.waits import wait_until

pytestmark = [pytest.mark.system]
LINES = 4000  # seconds of work at ~1,000 lines/s: the faults land 200 lines in


def bulk_config() -> dict[str, Any]:
    cfg = fault_config(
        "synthetic",
        params={"base_ms": 5, "per_token_ms": 0.05},
        batching={"max_batch": 16, "lease_s": 5},
    )
    cfg["bulk"] = {"lease_s": 1.5, "poll_s": 0.05, "slice_s": 30}
    return cfg


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedGateway]:
    with shared_gateway(tmp_path_factory.mktemp("gateway"), bulk_config()) as gw:
        yield gw


@pytest.fixture
def stack(gateway: SharedGateway, tmp_path: Path) -> Iterator[Stack]:
    with fresh_stack(gateway, tmp_path) as s:
        yield s


def spawn_bulk_worker(stack: Stack, cfg_path: Path) -> Proc:
    args = ["bulk", "worker", "-c", str(cfg_path), "--redis-url", stack.redis.url]
    proc = stack.spawn("bulk", args)
    wait_until(
        lambda: "Listening on" in proc.text() or not proc.alive(), 30, "the RQ worker", every_s=0.1
    )
    assert proc.alive(), proc.text()
    return proc


def upload(url: str) -> str:
    body = "".join(
        json.dumps({"input": f"w {i}", "custom_id": str(i)}) + "\n" for i in range(LINES)
    )
    with Client(url) as c:
        return str(c.bulk_submit(MODEL, body.encode())["id"])


def progress(url: str, bulk_id: str) -> dict[str, Any]:
    return dict(HTTP.get(f"{url}/v1/bulk/{bulk_id}", timeout=5).json())


def horse_of(proc: Proc) -> psutil.Process | None:
    kids = psutil.Process(proc.pid).children()
    return kids[0] if kids else None


def check_done(stack: Stack, cfg: dict[str, Any], url: str, bulk_id: str) -> None:
    final = wait_until(
        lambda: (p := progress(url, bulk_id))["state"] == "completed" and p,
        120,
        "the bulk job to complete",
        every_s=0.1,
    )
    assert final["counts"]["succeeded"] == LINES
    with Client(url) as c:
        lines = list(c.bulk_output(bulk_id))
    assert [o["custom_id"] for o in lines] == [str(i) for i in range(LINES)]
    assert all(o["result"] == {"tokens": 2} for o in lines)
    # No line ran twice: the model completed exactly one job per line.
    assert stack.queue(cfg).stats(MODEL).counters["succeeded"] == LINES


@dataclass
class Running:
    stack: Stack
    cfg: dict[str, Any]
    path: Path
    url: str
    bulk_workers: list[Proc]
    bulk_id: str


def start(gateway: SharedGateway, stack: Stack, bulk_workers: int) -> Running:
    """A model worker and bulk workers (beside the gateway); a bulk job 200 lines in."""
    cfg, path, url = bulk_config(), gateway.config, gateway.url
    stack.spawn_worker(path)
    workers = [spawn_bulk_worker(stack, path) for _ in range(bulk_workers)]
    bulk_id = upload(url)
    wait_until(
        lambda: progress(url, bulk_id)["counts"]["done"] >= 200, 60, "200 lines done", every_s=0.1
    )
    return Running(stack, cfg, path, url, workers, bulk_id)


def test_a_bulk_worker_killed_outright_is_resumed_by_another(
    gateway: SharedGateway, stack: Stack
) -> None:
    run = start(gateway, stack, 1)
    stack, cfg, path, url, bulk_id = run.stack, run.cfg, run.path, run.url, run.bulk_id
    first = run.bulk_workers[0]
    horse = horse_of(first)
    assert horse is not None
    horse.kill()  # the whole pod at once: the RQ worker and its work horse
    first.popen.kill()
    done_at_kill = progress(url, bulk_id)["counts"]["done"]
    assert done_at_kill < LINES
    second = spawn_bulk_worker(stack, path)
    check_done(stack, cfg, url, bulk_id)
    assert "resuming from line" in second.text()  # the new worker's reaper took it over


def test_a_hung_coordinator_is_superseded_and_changes_nothing_when_it_wakes(
    gateway: SharedGateway, stack: Stack
) -> None:
    run = start(gateway, stack, 2)
    stack, cfg, url, bulk_id, workers = run.stack, run.cfg, run.url, run.bulk_id, run.bulk_workers
    busy = wait_until(
        lambda: next((w for w in workers if horse_of(w)), None), 10, "a slice", every_s=0.1
    )
    horse = horse_of(busy)
    assert horse is not None
    horse.send_signal(signal.SIGSTOP)
    try:
        # The other worker's reaper sees the lease lapse and queues a new slice,
        # which that worker runs; progress resumes while the old one is frozen.
        at_stop = progress(url, bulk_id)["counts"]["done"]
        wait_until(
            lambda: progress(url, bulk_id)["counts"]["done"] > at_stop + 100,
            60,
            "progress without the hung coordinator",
            every_s=0.1,
        )
    finally:
        horse.send_signal(signal.SIGCONT)
    check_done(stack, cfg, url, bulk_id)
