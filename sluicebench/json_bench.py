"""``sluice bench json``: the hot path's JSON per job, the standard library vs orjson.

Per job with a 384-float embedding (MiniLM's size): the gateway parses the
stored result and encodes the response; the worker encodes the result twice (the
check that it is JSON, then the complete call). The "json" column is what the
code did before sluice/fastjson.py, the "orjson" column what it does now.
"""

from __future__ import annotations

import json
import random
import timeit
from typing import Any

import orjson

from sluice import fastjson


def _cases(dim: int) -> dict[str, tuple[Any, Any]]:
    rng = random.Random(1)
    payload = {"embedding": [rng.uniform(-0.2, 0.2) for _ in range(dim)]}
    text = json.dumps(payload, separators=(",", ":"))
    timings = {"queued_at": 1.0, "started_at": 1.1, "finished_at": 1.2, "run_ms": 50.0}
    view: dict[str, Any] = {"id": "minilm.x", "status": "succeeded", "timings": timings}

    def gateway_json() -> None:
        view["result"] = json.loads(text)
        json.dumps(view, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()

    def gateway_orjson() -> None:
        view["result"] = fastjson.loads(text)
        orjson.dumps(view)

    def worker_json() -> None:
        json.dumps(payload)
        json.dumps(payload, separators=(",", ":"))

    def worker_orjson() -> None:
        fastjson.dumps(payload)
        fastjson.dumps(payload)

    return {
        "gateway (parse result, encode response)": (gateway_json, gateway_orjson),
        "worker (check result, encode for complete)": (worker_json, worker_orjson),
    }


def run(dim: int = 384, number: int = 2000, repeat: int = 5) -> dict[str, Any]:
    rows = []
    for name, (old, new) in _cases(dim).items():
        old_us = min(timeit.repeat(old, number=number, repeat=repeat)) / number * 1e6
        new_us = min(timeit.repeat(new, number=number, repeat=repeat)) / number * 1e6
        rows.append(
            {
                "step": name,
                "json_us": round(old_us, 1),
                "orjson_us": round(new_us, 1),
                "speedup": round(old_us / new_us, 1),
            }
        )
    return {"dim": dim, "rows": rows}


def render(data: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    t = Table(title=f"JSON per job, a {data['dim']}-float embedding (best of 5)")
    for col in ("step", "json (us)", "orjson (us)", "speedup"):
        t.add_column(col)
    for r in data["rows"]:
        t.add_row(r["step"], str(r["json_us"]), str(r["orjson_us"]), f"{r['speedup']}x")
    console.print(t)
