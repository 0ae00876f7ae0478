"""System (e) of ``sluice bench generate``: the engine driven in one process, no queue,
no HTTP: the limit the served systems are held against.

Each step it admits waiting requests into free slots, then runs one engine step
and stamps every token it produced with the step's end. The closed loop keeps
``concurrency`` requests outstanding (a client's next request is sent when its
last one ends); the open loop lets each request wait from its due time. Run as
its own process with one torch thread (``python -m sluicebench.generate.inproc
PARAMS_JSON``, the requests as JSON on stdin): it prints one JSON line, the two
loops' traces and step times.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sluicebench.generate.client import LoopResult, Trace
from sluicebench.generate.stats import open_rate, summarize
from sluicebench.generate.workload import Request, arrivals


@dataclass
class Driver:
    """Requests waiting, in flight, and what each produced."""

    engine: Any
    sampling: Any  # SamplingParams' class
    waiting: deque[tuple[Request, float]] = field(default_factory=deque)
    live: dict[str, Trace] = field(default_factory=dict)
    step_s: list[float] = field(default_factory=list)

    def admit(self) -> None:
        while self.waiting and self.engine.active() < self.engine.slots:
            req, sent = self.waiting.popleft()
            params = self.sampling(max_tokens=req.max_tokens, temperature=0.0)
            self.engine.add(str(req.rid), req.prompt_ids, params)
            self.live[str(req.rid)] = Trace(req.rid, req.max_tokens, sent)

    def step(self) -> list[Trace]:
        """One engine step; the traces that ended in it."""
        t0 = time.perf_counter()
        outputs = self.engine.step()
        now = time.perf_counter()
        self.step_s.append(now - t0)
        ended = []
        for out in outputs:
            trace = self.live[out.seq_id]
            if out.token_ids:
                trace.chunks.append((now, len(out.token_ids)))
            if out.error:
                trace.error = out.error
            if out.finished or out.error:
                trace.done_s = now
                ended.append(self.live.pop(out.seq_id))
        return ended


def closed(
    d: Driver, reqs: list[Request], concurrency: int, duration_s: float, warm_s: float
) -> LoopResult:
    start = time.perf_counter()
    pending = iter(reqs)
    done: list[Trace] = []
    for _ in range(concurrency):
        req = next(pending, None)
        if req is not None:
            d.waiting.append((req, start))
    while d.waiting or d.live:
        d.admit()
        for trace in d.step():
            done.append(trace)
            req = next(pending, None)
            if req is not None and trace.done_s is not None and trace.done_s - start < duration_s:
                d.waiting.append((req, trace.done_s))
    return LoopResult(start, (warm_s, duration_s), done, time.perf_counter() - start)


def opened(d: Driver, reqs: list[Request], offsets: list[float]) -> LoopResult:
    start = time.perf_counter()
    due = deque(zip(reqs, offsets, strict=False))
    done: list[Trace] = []
    while due or d.waiting or d.live:
        now = time.perf_counter() - start
        while due and due[0][1] <= now:
            req, offset = due.popleft()
            d.waiting.append((req, start + offset))
        if not (d.waiting or d.live):
            time.sleep(max(0.0, due[0][1] - now))
            continue
        d.admit()
        done.extend(d.step())
    wall = time.perf_counter() - start
    return LoopResult(start, (0.0, wall), done, wall)


def _loop_dict(loop: LoopResult, steps: list[float], cpu_s: float) -> dict[str, Any]:
    steps = sorted(steps)
    return {
        "cpu_s": round(cpu_s, 2),
        "start_s": loop.start_s,
        "window_s": list(loop.window_s),
        "wall_s": loop.wall_s,
        "traces": [t.to_dict() for t in loop.traces],
        "median_step_ms": round(steps[len(steps) // 2] * 1000, 3) if steps else None,
        "steps": len(steps),
    }


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def run(p: dict[str, Any]) -> dict[str, Any]:
    """Warm the engine, then the closed loop, then the open loop at ``p['rate']`` (None:
    ``open_fraction`` of this closed loop)."""
    import torch

    from sluice.generate.params import SamplingParams
    from workers.generate.hf_engine import HFEngine

    torch.set_num_threads(p["threads"])
    engine = HFEngine(
        p["model_dir"],
        p["slots"],
        p["max_seq_tokens"],
        p["prefill_tokens"],
        "float32",
        "cpu",
        p["threads"],
    )
    reqs = [Request(rid, tuple(ids), n) for rid, ids, n in json.loads(sys.stdin.read())]
    d = Driver(engine, SamplingParams)
    closed(d, reqs[: p["slots"]], p["slots"], 1e9, 0.0)  # warm: every shape once
    d.step_s.clear()
    out: dict[str, Any] = {}
    cpu = _cpu_s()
    c = closed(d, reqs, p["concurrency"], p["duration_s"], p["warm_s"])
    out["closed"] = _loop_dict(c, d.step_s, _cpu_s() - cpu)
    rate = p.get("rate") or open_rate(summarize(c)["tokens_per_s"], reqs, p["open_fraction"])
    if rate > 0:
        d.step_s.clear()
        offsets = arrivals(rate, p["open_s"], p["seed"], len(reqs))
        cpu = _cpu_s()
        o = opened(d, reqs[::-1], offsets)  # as run.open_requests
        out["open"] = _loop_dict(o, d.step_s, _cpu_s() - cpu) | {"offered_rps": rate}
    engine.close()
    return out


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))))
