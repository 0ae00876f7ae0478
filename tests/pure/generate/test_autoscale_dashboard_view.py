"""The dashboard's generation panel (ADR 0149), computed from heartbeats and the
TTFT histogram: slots, occupancy, TTFT p50/p99 against ttft_slo_ms, tokens/s. Pure."""

from __future__ import annotations

import time
from typing import Any

from gateway.dashboard import view
from sluice.config import parse_config
from sluice.records import WAIT_LABELS
from sluice.registry import WorkerInfo
from tests.factories import worker_info

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


def test_the_panel_is_computed_from_heartbeats_and_the_histogram() -> None:
    ws = [_gen_worker("a", 8, 6, 500.0), _gen_worker("b", 8, 2, 300.0)]
    ws.append(_gen_worker("c", 8, 8, 900.0, state="starting"))  # not serving: not counted
    hist = {WAIT_LABELS[3]: 99, WAIT_LABELS[8]: 1}  # 99 within 50 ms, 1 slower
    g = view.generate_view(MODELS["lm"], ws, [hist])
    assert (g["slots"], g["slots_busy"], g["occupancy"]) == (16, 8, 0.5)
    assert (g["tokens_per_s"], g["tokens_per_s_per_worker"]) == (800.0, 400.0)
    assert g["ttft_count"] == 100 and g["ttft_slo_ms"] == 200
    assert g["ttft_p50_ms"] is not None and g["ttft_p50_ms"] <= 50
    assert g["over_slo"] is (g["ttft_p99_ms"] > 200)
    empty = view.generate_view(MODELS["lm"], [], [])
    assert (empty["occupancy"], empty["ttft_p99_ms"], empty["over_slo"]) == (None, None, False)
