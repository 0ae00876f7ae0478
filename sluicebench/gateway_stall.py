"""Event-loop stall while a large input is estimated: inline vs a worker thread.

``sluice bench gateway-stall``: for each text
size, the longest gap a 1 ms asyncio ticker sees while the tokenizer runs
(a) inline on the loop (the code before the fix), (b) in a worker thread with
the GIL held (``Tokenizer.encode``: a thread alone), (c) through the gateway's
``_estimate_all`` (a worker thread over 16 KB, ``encode_batch`` over 4 KB).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gateway import service
from sluice.config import parse_config
from sluice.cost import CostEstimator

SIZES = (16_384, 262_144, 1_048_576)


async def _max_gap_ms(work: Callable[[], Awaitable[Any]]) -> float:
    stop, gap = asyncio.Event(), 0.0

    async def tick() -> None:
        nonlocal gap
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gap, last = max(gap, now - last), now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    await work()
    stop.set()
    await ticker
    return gap * 1000


async def _run(sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    cfg = parse_config(
        {
            "models": {
                "m": {
                    "handler": "synthetic",
                    "buckets": [128, 512],
                    "cost": {"method": "tokenizer", "truncate": True},
                }
            }
        }
    )
    est = CostEstimator(cfg.models["m"])
    tok = est._tokenizer
    st: Any = type("St", (), {"estimators": {"m": est}})()
    est.estimate("warm up")
    rows = []
    for n in sizes:
        text = ("lorem ipsum dolor sit amet " * (n // 27 + 1))[:n]

        async def inline(text: str = text) -> None:
            est.estimate(text)

        async def thread_gil(text: str = text) -> None:
            await asyncio.to_thread(tok.encode, text)

        async def now(text: str = text) -> None:
            await service._estimate_all(st, "m", [text])

        row: dict[str, float] = {"chars": n}
        for name, work in (("inline", inline), ("thread_gil_held", thread_gil), ("now", now)):
            row[name] = round(min([await _max_gap_ms(work) for _ in range(3)]), 1)
        rows.append(row)
    return rows


def main(json_path: Path | None = None, sizes: tuple[int, ...] = SIZES) -> list[dict[str, Any]]:
    rows = asyncio.run(_run(sizes))
    print(f"{'chars':>9} {'inline ms':>10} {'thread+GIL ms':>14} {'now ms':>8}  (longest loop gap)")
    for r in rows:
        print(f"{r['chars']:>9} {r['inline']:>10} {r['thread_gil_held']:>14} {r['now']:>8}")
    if json_path is not None:
        json_path.write_text(json.dumps({"bench": "gateway_stall", "rows": rows}, indent=2))
    return rows
