"""The gateway's CPU per ``predict`` with the e2e benchmark's texts (docs/benchmarks/e2e.md).

``sluice bench cost`` sends one short text to a ``words``-costed model; ``sluice
bench e2e`` sends 2,000 mixed-length texts to the example config's MiniLM, costed
with its tokenizer. This runs the cost benchmark's stack (one private Redis, one
gateway, the stand-in worker answering 384 floats; sluicebench/cost_procs.py)
under a closed loop of 64 ``predict`` callers, once per case:

- ``short-words``: the cost benchmark's text, ``words`` cost;
- ``e2e-words``: the e2e texts, ``words`` cost (the bodies alone);
- ``e2e-tokenizer``: the e2e texts, MiniLM's tokenizer as the cost;
- ``example``: the e2e texts, examples/sluice.yaml (its MiniLM as the model).

Each figure is the gateway's CPU (user + system) per answered request, less its
idle floor. With ``--other CHECKOUT`` the other checkout's gateway runs each case
too, in ABBA order. Run: ``python -m sluicebench.gateway_texts [--other DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import itertools
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
import yaml

from sluice.local.redis_server import start_redis
from sluicebench import cost_bench as cb
from sluicebench.cost_procs import MODEL
from sluicebench.e2e_bench import EXAMPLE, E2EParams, workload
from sluicebench.loadgen.http import EngineError, LeanEngine

CASES = ("short-words", "e2e-words", "e2e-tokenizer", "example")
CONCURRENCY = 64


def case_config(case: str) -> dict[str, Any]:
    """The gateway's config for ``case`` (its model named as the stand-in worker's)."""
    if case == "example":
        cfg = yaml.safe_load(EXAMPLE.read_text())
        model = cfg["models"][MODEL] = cfg["models"].pop("minilm")
        model["autoscaling"]["min_replicas"] = 0  # the stand-in worker registers no readiness
        model["autoscaling"].pop("warm_pool", None)
        return dict(cfg)
    cfg = copy.deepcopy(cb.CONFIG)
    cost = "words" if case.endswith("words") else "tokenizer"
    cfg["models"][MODEL].update(cost={"method": cost}, buckets=[32, 128, 512])
    return cfg


def case_texts(case: str) -> list[str]:
    p = E2EParams()
    return [cb.TEXT] if case == "short-words" else [t for _, t in workload(p.texts, p.seed)]


async def closed_loop(port: int, texts: list[str], seconds: float) -> dict[str, int]:
    client = LeanEngine(f"http://127.0.0.1:{port}", None, headers={})
    bodies = itertools.cycle([json.dumps({"input": t}).encode() for t in texts])
    counts = {"requests": 0, "errors": 0}
    loop = asyncio.get_running_loop()
    stop = loop.time() + seconds

    async def caller() -> None:
        while loop.time() < stop:
            try:
                status, raw = await client.send("POST", f"/v1/models/{MODEL}/predict", next(bodies))
            except EngineError:
                status, raw = 0, b""
            ok = status == 200 and b'"status":"succeeded"' in raw
            counts["requests" if ok else "errors"] += 1

    await asyncio.gather(*(caller() for _ in range(CONCURRENCY)))
    await client.aclose()
    return counts


def measure(checkout: Path, case: str, seconds: float) -> dict[str, Any]:
    """One case on a fresh Redis, gateway and stand-in worker of ``checkout``."""
    server = start_redis()
    r = redis.Redis.from_url(server.url, decode_responses=True)
    tmp = Path(tempfile.mkdtemp(prefix="sluice-gwtexts-"))
    gw, port = cb._start_gateway(checkout, server.url, tmp, case_config(case))
    wk = cb._spawn(checkout, ["worker", server.url, "32", str(cb.DIM)], tmp / "w.json")
    texts = case_texts(case)
    try:
        asyncio.run(closed_loop(port, texts, 1.5))  # connections, imports, caches
        idle = cb.idle_rates(gw, wk, r, 2.0)["gateway_cpu_s"]
        a, t0 = gw.snapshot(), time.perf_counter()
        counts = asyncio.run(closed_loop(port, texts, seconds))
        wall, b = time.perf_counter() - t0, gw.snapshot()
    finally:
        wk.stop()
        gw.stop()
        r.close()
        server.stop()
    cpu_ms = (b["cpu_s"] - a["cpu_s"] - idle * wall) * 1e3
    return {
        "checkout": str(checkout),
        "case": case,
        **counts,
        "rps": round(counts["requests"] / wall, 1),
        "gateway_cpu_ms_per_request": round(cpu_ms / max(counts["requests"], 1), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--other", type=Path, help="another checkout, measured ABBA")
    args = ap.parse_args()
    here = Path(__file__).resolve().parent.parent
    order = [here] if args.other is None else [args.other, here, here, args.other]
    for case in args.cases.split(","):
        for checkout in order:
            print(json.dumps(measure(checkout.resolve(), case, args.seconds)), flush=True)


if __name__ == "__main__":
    main()
