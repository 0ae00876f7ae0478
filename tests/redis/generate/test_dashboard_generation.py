"""The dashboard's generation panel data (ADR 0149) from a real Redis: slots from
the heartbeats, TTFT p50/p99 against ttft_slo_ms from the TTFT histogram, tokens/s;
still one round trip for every model; absent (null) for an embedding model."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.dashboard.feed import DashboardFeed
from gateway.redis_io import RedisGate
from sluice import keys, registry, waits
from sluice.config import parse_config
from sluice.records import WAIT_COUNT_FIELD, WAIT_LABELS
from sluice.registry import WorkerInfo
from tests.factories import worker_info

pytestmark = [pytest.mark.redis, pytest.mark.asyncio(loop_scope="function")]

MODELS = dict(
    parse_config(
        {
            "models": {
                "lm": {
                    "handler": "causal-lm",
                    "params": {"model": "tiny:4x256"},
                    "generate": {"slots": 8},
                    "autoscaling": {"ttft_slo_ms": 200},
                },
                "emb": {"handler": "synthetic"},
            }
        }
    ).models
)


def _gen_worker(wid: str, slots: int, busy: int, tps: float, **kw: Any) -> WorkerInfo:
    """A generative worker's heartbeat (registry.WorkerInfo's slot fields)."""
    return worker_info(
        id=wid,
        model="lm",
        heartbeat_at=time.time(),
        slots=slots,
        slots_busy=busy,
        tokens_per_s=tps,
        **kw,
    )


async def test_the_feed_carries_a_generation_panel_per_generative_model(redis_url: str) -> None:
    r = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        for w in (_gen_worker("a", 8, 7, 640.0), _gen_worker("b", 8, 3, 360.0)):
            for cmd in registry.heartbeat(w, 10.0):
                await r.execute_command(*cmd)
        now = time.time()
        key = f"{keys.ttft_hist_prefix('lm')}{waits.window_start(now)}"
        await r.hset(key, mapping={WAIT_LABELS[-1]: 5, WAIT_COUNT_FIELD: 5})  # all slow
        feed = DashboardFeed(r, MODELS, RedisGate(2.0, 8), cache=False, wall=lambda: now)
        state = {m["name"]: m for m in (await feed.get())["models"]}
    finally:
        await r.aclose()
    g = state["lm"]["generate"]
    assert (g["slots"], g["slots_busy"], g["occupancy"], g["tokens_per_s"]) == (
        16,
        10,
        0.625,
        1000.0,
    )
    assert g["ttft_count"] == 5 and g["over_slo"] is True
    assert state["emb"]["generate"] is None
