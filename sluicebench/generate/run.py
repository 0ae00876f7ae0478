"""One ``sluice bench generate`` run: every chosen system, one after the other.

(a) runs first: its closed-loop requests/s sets the open loop's Poisson rate
(``open_fraction`` of it) that every other system is offered too. Each served
system: start, closed loop (``concurrency`` streaming clients for ``duration_s``,
tokens/s counted after ``warm_s``), open loop (arrivals for ``open_s``), stop. (e)
runs the same requests in its own process. The same request list, in the same
order, for every system.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sluicebench.generate import stats, systems
from sluicebench.generate.client import LoopResult, Target, Trace, closed_loop, open_loop
from sluicebench.generate.workload import (
    MAX_TOKENS_MIX,
    Request,
    arrivals,
    canonical,
    mean_output_tokens,
    requests,
)

ALL_SYSTEMS = ("a", "b", "c", "d", "e")


@dataclass(frozen=True)
class GenParams:
    model: str = "tiny:4x256"
    systems: tuple[str, ...] = ALL_SYSTEMS
    slots: int = 32
    concurrency: int = 64
    duration_s: float = 20.0  # closed loop, per system
    warm_s: float = 4.0  # left out of the closed loop's tokens/s
    open_s: float = 15.0  # open loop: seconds of arrivals
    open_fraction: float = 0.7
    open_rate: float | None = None  # requests/s; None: open_fraction of the first closed loop
    requests: int = 2000  # the pool both loops draw from (a bound on each loop)
    seed: int = 1
    threads: int = 1
    mix: tuple[tuple[int, float], ...] = MAX_TOKENS_MIX  # (max_tokens, weight)


def bench_model(spec: str) -> tuple[Path, int]:
    """The model's HF directory (built once for a tiny spec) and its vocabulary."""
    from sluice.generate.tiny import resolve_model_dir

    model_dir = resolve_model_dir(spec)
    config = json.loads((model_dir / "config.json").read_text())
    return model_dir, int(config["vocab_size"])


def workload(p: GenParams, model_dir: Path, vocab: int) -> list[Request]:
    """The run's requests, their prompts canonical for the model's tokenizer."""
    from sluice.generate.prompt import PromptCodec

    drawn = requests(p.requests, p.seed, vocab, mix=p.mix)
    return canonical(drawn, PromptCodec.load(model_dir))


def served(
    name: str, p: GenParams, model_dir: Path, reqs: list[Request], rate: float | None, log_dir: Path
) -> dict[str, Any]:
    t0 = time.monotonic()
    run = systems.start(name, model_dir, p.slots, p.threads, log_dir)
    out: dict[str, Any] = {"start_s": round(time.monotonic() - t0, 1)}
    try:
        target = Target(run.url, systems.MODEL, prompt_as_ids=run.prompt_as_ids, extra=run.extra)
        cpu = systems.Cpu(run.proc.pid)
        cpu.mark()
        loop = asyncio.run(closed_loop(target, iter(reqs), p.concurrency, p.duration_s, p.warm_s))
        out["closed"] = stats.with_cpu(stats.summarize(loop), cpu.since())
        rate = rate or stats.open_rate(out["closed"]["tokens_per_s"], reqs, p.open_fraction)
        cpu.mark()
        later = open_requests(reqs)
        loop = asyncio.run(open_loop(target, later, arrivals(rate, p.open_s, p.seed, len(reqs))))
        out["open"] = stats.with_cpu(stats.summarize(loop), cpu.since()) | {"offered_rps": rate}
        return out
    finally:
        t0 = time.monotonic()
        run.stop()
        out["stop_s"] = round(time.monotonic() - t0, 1)


def open_requests(reqs: list[Request]) -> list[Request]:
    """The open loop's requests: the pool from its end, so a server with a prefix
    cache (vLLM) does not see the closed loop's prompts again (unless the closed loop
    took most of the pool)."""
    return reqs[::-1]


def _loop(d: dict[str, Any]) -> LoopResult:
    traces = [Trace.from_dict(t) for t in d["traces"]]
    return LoopResult(d["start_s"], tuple(d["window_s"]), traces, d["wall_s"])  # type: ignore[arg-type]


def in_process(
    p: GenParams, model_dir: Path, reqs: list[Request], rate: float | None
) -> dict[str, Any]:
    """System (e) in a child process of one torch thread (the requests on its stdin)."""
    args = asdict(p) | {
        "model_dir": str(model_dir),
        "rate": rate,
        "max_seq_tokens": 1024,
        "prefill_tokens": 256,
    }
    env = os.environ | {"OMP_NUM_THREADS": str(p.threads), "MKL_NUM_THREADS": str(p.threads)}
    done = subprocess.run(
        [sys.executable, "-m", "sluicebench.generate.inproc", json.dumps(args)],
        input=json.dumps([[r.rid, list(r.prompt_ids), r.max_tokens] for r in reqs]),
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"(e) failed: {done.stderr[-2000:]}")
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    out = {}
    for phase, d in raw.items():
        cpu = {"engine": {"procs": 1, "cpu_s": d["cpu_s"]}}
        out[phase] = stats.with_cpu(stats.summarize(_loop(d)), cpu) | {
            "median_step_ms": d["median_step_ms"],
            "offered_rps": d.get("offered_rps"),
            "steps": d["steps"],
        }
    return out


def run_generate(
    p: GenParams, log_dir: Path, progress: Callable[[str], None] = print
) -> dict[str, Any]:
    model_dir, vocab = bench_model(p.model)
    reqs = workload(p, model_dir, vocab)
    rate = p.open_rate
    results: dict[str, Any] = {}
    began = time.monotonic()
    for name in [s for s in ALL_SYSTEMS if s in p.systems]:
        at = time.monotonic() - began
        progress(f"generate: ({name}) {systems.describe(name)['label']} ... (at {at:.0f} s)")
        info = systems.describe(name)
        try:
            if name == "e":
                results[name] = info | in_process(p, model_dir, reqs, rate)
            else:
                results[name] = info | served(name, p, model_dir, reqs, rate, log_dir)
        except systems.Skipped as e:
            results[name] = info | {"skipped": str(e)}
            progress(f"generate: ({name}) skipped: {e}")
            continue
        if rate is None:  # the first system that ran sets the open loop's rate
            rate = results[name]["open"]["offered_rps"]
    return {
        "params": asdict(p),
        "model_dir": str(model_dir),
        "mean_output_tokens": mean_output_tokens(p.mix),
        "open_rate_rps": rate,
        "systems": results,
        "ratios": stats.ratios(results),
        "targets": stats.targets(results),
    }
