"""``sluice bench e2e``'s parts that decide its figures, without a model: the
workload, the per-class summary, the ratios, process roles, the micro-batcher's
batching, and both load loops against a stub server on loopback."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI

from sluicebench import microbatcher
from sluicebench.e2e_bench import (
    CLASSES,
    Call,
    closed_loop,
    microbatcher_target,
    open_loop,
    ratios,
    summarize,
    workload,
)
from sluicebench.e2e_served import role_of
from sluicebench.loadgen.workload import MIXED
from tests.kit.served import served


def test_the_workload_is_seeded_and_mixed_as_documented() -> None:
    items = workload(2000, 1)
    assert items == workload(2000, 1) and items != workload(2000, 2)
    share = Counter(cls for cls, _ in items)
    assert abs(share["short"] / 2000 - 0.70) < 0.04
    assert abs(share["medium"] / 2000 - 0.25) < 0.04
    assert abs(share["long"] / 2000 - 0.05) < 0.02
    bands = dict(zip(CLASSES, MIXED, strict=True))
    for cls, text in items:
        assert bands[cls].lo <= len(text.split()) <= bands[cls].hi


def test_summary_counts_only_successes_per_class() -> None:
    calls = [Call("short", 10.0, True), Call("short", 30.0, True), Call("long", 90.0, True)]
    calls.append(Call("medium", 5.0, False))
    out = summarize(calls, 2.0)
    assert out["requests"] == 4 and out["errors"] == 1 and out["rps"] == 1.5
    assert out["short"] == {"count": 2, "p50_ms": 20.0, "p99_ms": 29.8}
    assert out["medium"]["count"] == 0 and out["medium"]["p99_ms"] is None
    assert out["all"]["count"] == 3


def _served(rps: float, p99: float) -> dict[str, Any]:
    return {"closed": {"rps": rps}, "open": {"all": {"p99_ms": p99}}}


def test_ratios_compare_within_the_run_and_skip_what_did_not_run() -> None:
    r = ratios({"example": _served(90, 300), "best": _served(100, 200), "in_process": {"rps": 125}})
    assert r["example_over_best_closed"] == 0.9
    assert r["best_over_in_process_closed"] == 0.8
    assert r["open_p99_example_over_best"] == 1.5
    assert r["best_over_microbatcher_closed"] is None
    assert r["open_p99_best_over_microbatcher"] is None


def test_processes_are_grouped_by_role() -> None:
    py = "/venv/bin/python"
    assert role_of([py, "-m", "sluice", "gateway", "--port", "1"]) == "gateway"
    assert role_of([py, "-m", "sluice", "worker", "--model", "minilm"]) == "worker"
    assert role_of([py, "-m", "sluice", "bulk", "worker"]) == "bulk"
    assert role_of([py, "-m", "sluice", "autoscaler"]) == "autoscaler"
    assert role_of([py, "-m", "sluice", "up", "--config", "x"]) == "sluice up"
    assert role_of(["/usr/bin/redis-server", "*:6379"]) == "redis"
    assert role_of([py, "-m", "sluicebench.microbatcher", "8000"]) == "microbatcher"


async def test_the_micro_batcher_takes_what_is_queued_up_to_its_batch() -> None:
    sizes: list[int] = []

    def encode(texts: list[str]) -> list[list[float]]:
        sizes.append(len(texts))
        if "bad" in texts:
            raise ValueError("bad input")
        return [[float(len(t))] for t in texts]

    queue: microbatcher.Pending = asyncio.Queue()
    task = asyncio.create_task(microbatcher.batcher(queue, encode))
    loop = asyncio.get_running_loop()
    futs = [loop.create_future() for _ in range(40)]
    for i, fut in enumerate(futs):
        queue.put_nowait(("x" * i, fut))
    assert [await f for f in futs] == [[float(i)] for i in range(40)]
    assert sizes == [microbatcher.MAX_BATCH, 40 - microbatcher.MAX_BATCH]
    bad: asyncio.Future[list[float]] = loop.create_future()
    queue.put_nowait(("bad", bad))
    with pytest.raises(ValueError, match="bad input"):
        await bad
    task.cancel()


def _stub() -> FastAPI:
    app = FastAPI()

    @app.post("/embed")
    async def embed() -> dict[str, Any]:
        await asyncio.sleep(0.005)
        return {"embedding": [0.5]}

    return app


@pytest.fixture
def stub_url() -> Iterator[str]:
    with served(_stub()) as port:
        yield f"http://127.0.0.1:{port}"


async def test_both_loops_send_every_item_and_time_it(stub_url: str) -> None:
    target = microbatcher_target(stub_url)
    items = workload(50, 3)
    calls, wall = await closed_loop(target, iter(items), 8)
    assert len(calls) == 50 and all(c.ok for c in calls)
    assert Counter(c.cls for c in calls) == Counter(cls for cls, _ in items)
    assert all(c.latency_ms > 0 for c in calls) and wall > 0
    calls, wall = await open_loop(target, items, 100.0, 0.5, seed=1)
    assert 20 <= len(calls) <= 100 and all(c.ok for c in calls)  # Poisson, ~50 expected
    assert wall > 0 and all(c.latency_ms > 0 for c in calls)
    down = microbatcher_target("http://127.0.0.1:9")  # nothing listens: errors, not a hang
    calls, _ = await closed_loop(down, iter(items[:3]), 2)
    assert [c.ok for c in calls] == [False, False, False]
