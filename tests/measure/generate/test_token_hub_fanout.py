"""The token hub's fan-out, measured: 200 followed jobs x 5 listeners each, 50 decode
steps (each writes every job's entry in one MULTI, 20 ms apart). Prints the XREADs
made, the Redis connections open and the step-to-listener latency; asserts only
that every listener got every entry with one read per step or so.

Run: ``pytest -s tests/measure/generate/test_token_hub_fanout.py``."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.redis_io import RedisGate, connect
from gateway.token_hub import TokenHub
from sluice import keys
from tests.waits import async_wait_until

pytestmark = pytest.mark.asyncio(loop_scope="function")
JOBS, PER_JOB, STEPS = 200, 5, 50
HANG_S = 30.0


async def test_one_read_per_step_serves_a_thousand_listeners(redis_url: str) -> None:
    # Redis calls bounded by "did not hang", not by the gateway's 2 s: a thousand
    # catch-up reads on a loaded machine (a coverage run) took longer than 2 s.
    t = HANG_S
    blocking, pool, w = connect(redis_url, t), connect(redis_url, t), connect(redis_url, t)
    hub = TokenHub(blocking, reads=pool, call=RedisGate(t, 64), timeout_s=t)
    lat: list[float] = []
    sent_at: dict[int, float] = {}
    counts: list[int] = []

    async def follow(job: str) -> None:
        listener, n = hub.join("g", job), 0
        async for batch in hub.follow(listener):
            now = time.perf_counter()
            for _, f in batch:
                if f["t"] == "tokens":
                    n += 1
                    lat.append(now - sent_at[int(f["i"])])
        hub.leave(listener)
        counts.append(n)

    jobs = [f"g.j{i}" for i in range(JOBS)]
    tasks = [asyncio.create_task(follow(j)) for j in jobs for _ in range(PER_JOB)]
    try:
        await async_wait_until(
            lambda: "g" in hub.readers and len(hub.readers["g"].streams) == JOBS, what="all"
        )
        reader = hub.readers["g"]
        before, conns = reader.reads, len(await w.client_list())
        for i in range(STEPS):
            pipe = w.pipeline(transaction=True)
            for j in jobs:
                entry = {"t": "tokens", "a": "1", "i": str(i), "ids": "[1]", "x": "a"}
                pipe.xadd(keys.stream_key("g", j), entry)  # type: ignore[arg-type]
            sent_at[i] = time.perf_counter()
            await pipe.execute()
            await asyncio.sleep(0.02)  # a 20 ms decode step
        pipe = w.pipeline(transaction=True)
        for j in jobs:
            pipe.xadd(keys.stream_key("g", j), {"t": "end", "a": "1", "r": "{}"})
        await pipe.execute()
        await asyncio.wait_for(asyncio.gather(*tasks), 120)
    finally:
        await hub.stop()
        for c in (blocking, pool, w):
            await c.aclose()
    reads = reader.reads - before
    lat.sort()
    print(
        f"\n{JOBS} jobs x {PER_JOB} listeners, {STEPS} steps: {reads} XREADs for "
        f"{JOBS * PER_JOB * STEPS} deliveries, {conns} Redis clients open; step to listener "
        f"p50 {1000 * lat[len(lat) // 2]:.1f} ms, p99 {1000 * lat[int(len(lat) * 0.99)]:.1f} ms"
    )
    assert counts == [STEPS] * (JOBS * PER_JOB)
    assert reads < JOBS * STEPS / 10  # per step, not per stream
