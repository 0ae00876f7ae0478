"""``sluice bench e2e``: what a new user gets, against the best config and the limits.

One workload, the one a new user tries: ``texts`` mixed-length texts (70% short,
25% medium, 5% long words from a common-word list; MiniLM's tokenizer maps
each word to one token). Four systems, one after the other in one run:

- (a) ``example``: ``sluice up --config examples/sluice.yaml``, untouched;
- (b) ``best``: ``sluice up`` with the best config found (``bench/e2e_best.yaml``);
- (c) ``in_process``: the limit, the embedding handler in one process on
  length-sorted batches of ``batch`` with the machine's cores as torch threads,
  no HTTP, no queue;
- (d) ``microbatcher``: FastAPI + an asyncio micro-batcher in one process
  (sluicebench/microbatcher.py), the hand-rolled alternative.

Each served system (a, b, d) gets a warm-up closed loop (at least ``warm_s``
and until the autoscaler has settled: (a) starts one worker and scales to its
most under this load; when each count was reached is reported), then a
closed loop of ``concurrency`` callers over every text once (``predict`` for
Sluice, ``/embed`` for (d)), then an open loop of Poisson arrivals at
``open_fraction`` of (b)'s closed-loop rate for ``open_s`` (the same offered
rate for a, b and d), latency from each arrival's scheduled time (no
coordinated omission). CPU per process and RSS are read from /proc with psutil.
The load generator runs on the same machine (its CPU is reported too).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from sluice.cores import THREADS_ENV, machine_cores
from sluicebench.e2e_served import (
    MODEL,
    Procs,
    Served,
    start_microbatcher,
    start_up,
    workers_now,
)
from sluicebench.loadgen.http import EngineError, EngineTimeout, LeanEngine
from sluicebench.loadgen.stats import percentile
from sluicebench.loadgen.workload import MIXED, text_of

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "sluice.yaml"
BEST = REPO / "bench" / "e2e_best.yaml"
CLASSES = ("short", "medium", "long")  # the workload's bands, in MIXED's order
Item = tuple[str, str]  # (class, text)


@dataclass(frozen=True)
class E2EParams:
    texts: int = 2000
    concurrency: int = 64
    open_fraction: float = 0.7
    open_s: float = 20.0
    warm_s: float = 30.0
    batch: int = 32
    seed: int = 1
    threads: int = 0  # torch threads of (c) and (d); 0: the machine's cores
    systems: tuple[str, ...] = ("example", "best", "in_process", "microbatcher")
    best_config: str = str(BEST)


def workload(n: int, seed: int) -> list[Item]:
    """``n`` (class, text) pairs, the same for every system of a run."""
    rng = random.Random(seed)
    weights = [b.weight for b in MIXED]
    out = []
    for _ in range(n):
        i = rng.choices(range(len(MIXED)), weights=weights)[0]
        out.append((CLASSES[i], text_of(rng.randint(MIXED[i].lo, MIXED[i].hi), rng)))
    return out


@dataclass(frozen=True, slots=True)
class Call:
    cls: str
    latency_ms: float
    ok: bool


def summarize(calls: list[Call], wall_s: float) -> dict[str, Any]:
    """Throughput of successes and per-class p50/p99 (ms)."""
    ok = [c for c in calls if c.ok]
    out: dict[str, Any] = {
        "requests": len(calls),
        "errors": len(calls) - len(ok),
        "wall_s": round(wall_s, 2),
        "rps": round(len(ok) / wall_s, 1) if wall_s > 0 else 0.0,
    }
    for name in ("all", *CLASSES):
        lat = [c.latency_ms for c in ok if name in ("all", c.cls)]
        out[name] = {
            "count": len(lat),
            "p50_ms": round(percentile(lat, 50), 1) if lat else None,
            "p99_ms": round(percentile(lat, 99), 1) if lat else None,
        }
    return out


# -- the client ----------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where and how to ask for one embedding."""

    url: str
    path: str
    body: Callable[[str], dict[str, Any]]
    succeeded: Callable[[bytes], bool]


def sluice_target(url: str) -> Target:
    return Target(
        url,
        f"/v1/models/{MODEL}/predict",
        lambda text: {"input": text},
        lambda raw: b'"status":"succeeded"' in raw,
    )


def microbatcher_target(url: str) -> Target:
    return Target(url, "/embed", lambda text: {"input": text}, lambda raw: b'"embedding"' in raw)


async def _one(engine: LeanEngine, target: Target, item: Item, sent: float) -> Call:
    payload = json.dumps(target.body(item[1]), separators=(",", ":")).encode()
    try:
        status, raw = await engine.send("POST", target.path, payload)
        ok = status == 200 and target.succeeded(raw)
    except (EngineError, EngineTimeout, OSError):
        ok = False
    return Call(item[0], (time.perf_counter() - sent) * 1000, ok)


async def closed_loop(
    target: Target, items: Iterator[Item], concurrency: int
) -> tuple[list[Call], float]:
    """``concurrency`` callers, each sending its next item when its last one answered."""
    engine = LeanEngine(target.url, 120.0, headers={})
    calls: list[Call] = []

    async def caller() -> None:
        for item in items:  # one iterator shared by all callers
            calls.append(await _one(engine, target, item, time.perf_counter()))

    start = time.perf_counter()
    try:
        await asyncio.gather(*(caller() for _ in range(concurrency)))
    finally:
        await engine.aclose()
    return calls, time.perf_counter() - start


async def open_loop(
    target: Target, items: list[Item], rate: float, duration_s: float, seed: int
) -> tuple[list[Call], float]:
    """Poisson arrivals at ``rate``/s for ``duration_s``; each call timed from its
    scheduled arrival, so a stalled server is charged for the callers it kept waiting.
    The time returned runs to the last answer (an overloaded server's rate falls)."""
    rng = random.Random(seed + 1)
    at, schedule = 0.0, []
    while True:
        at += rng.expovariate(rate)
        if at >= duration_s:
            break
        schedule.append(at)
    engine = LeanEngine(target.url, 120.0, headers={})
    start = time.perf_counter()
    tasks = []
    try:
        for i, offset in enumerate(schedule):
            due = start + offset
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            item = items[i % len(items)]
            tasks.append(asyncio.create_task(_one(engine, target, item, due)))
        calls = list(await asyncio.wait_for(asyncio.gather(*tasks), 180.0))
    finally:
        await engine.aclose()
    return calls, time.perf_counter() - start  # until the last answer: an overload's tail counts


def cycle(items: list[Item]) -> Iterator[Item]:
    while True:
        yield from items


def timed_cycle(items: list[Item], seconds: float) -> Iterator[Item]:
    """Items round and round until ``seconds`` have passed (for the warm-up)."""
    end = time.perf_counter() + seconds
    for item in cycle(items):
        if time.perf_counter() >= end:
            return
        yield item


# -- the systems ------------------------------------------------------------------


WARM_STEP_S = 10.0
WARM_MAX_S = 180.0
# An autoscaler that has not changed the ready count for this many steps (30 s) has
# settled; one step is too few: it may still be deciding (it took 36 s under this load).
WARM_SETTLED_STEPS = 3


def warm_up(served: Served, target: Target, items: list[Item], p: E2EParams) -> dict[str, Any]:
    """Closed loop in steps of WARM_STEP_S for at least ``warm_s`` and until the
    autoscaler has settled: no worker starting or draining and the same ready count
    for WARM_SETTLED_STEPS steps (at most WARM_MAX_S). Returns when each worker
    count was reached."""
    sluice = target.path != "/embed"
    start = time.perf_counter()
    seen: list[dict[str, Any]] = []
    last, same = -1, 0  # the ready count, and how many steps in a row ended with it
    while True:
        asyncio.run(closed_loop(target, timed_cycle(items, WARM_STEP_S), p.concurrency))
        elapsed = time.perf_counter() - start
        if not sluice:
            if elapsed >= p.warm_s:
                return {"warmup_s": round(elapsed, 1), "workers": []}
            continue
        now = workers_now(served)
        ready = now.get("ready", 0)
        if ready == last:
            same += 1
        else:
            last, same = ready, 1
            seen.append({"at_s": round(elapsed, 1), "ready": ready})
        busy = now.get("starting") or now.get("draining")
        settled = same >= WARM_SETTLED_STEPS and not busy
        if (elapsed >= p.warm_s and settled) or elapsed >= WARM_MAX_S:
            return {"warmup_s": round(elapsed, 1), "workers": seen}


def drive(
    served: Served, target: Target, items: list[Item], p: E2EParams, rate: float | None
) -> dict[str, Any]:
    """Warm up, closed loop, open loop (at ``rate``, or at open_fraction of this closed loop)."""
    procs = Procs(served.proc.pid)
    client = psutil.Process()
    out: dict[str, Any] = {}

    out["warmup"] = warm_up(served, target, items, p)
    sluice = target.path != "/embed"
    out["workers_after_warmup"] = workers_now(served).get("ready") if sluice else None
    procs.mark()
    cpu0 = sum(client.cpu_times()[:2])
    calls, wall = asyncio.run(closed_loop(target, iter(items), p.concurrency))
    out["closed"] = summarize(calls, wall)
    out["closed"]["processes"] = procs.since_mark(wall)
    out["closed"]["client_cpu_pct"] = round((sum(client.cpu_times()[:2]) - cpu0) / wall * 100, 1)
    offered = rate if rate is not None else out["closed"]["rps"] * p.open_fraction
    procs.mark()
    cpu0 = sum(client.cpu_times()[:2])
    calls, wall = asyncio.run(open_loop(target, items, offered, p.open_s, p.seed))
    out["open"] = summarize(calls, wall) | {"offered_rps": round(offered, 1)}
    out["open"]["processes"] = procs.since_mark(wall)
    out["open"]["client_cpu_pct"] = round((sum(client.cpu_times()[:2]) - cpu0) / wall * 100, 1)
    out["workers_at_end"] = workers_now(served).get("ready") if sluice else None
    out["rss_mib"] = round(sum(r["rss_mib"] for r in out["open"]["processes"].values()), 1)
    return out


def in_process(p: E2EParams, procs: int, threads: int) -> dict[str, Any]:
    """System (c): ``procs`` fresh processes of ``threads`` torch threads each (set
    before torch starts), the sorted batches dealt out between them, all starting
    together once every model is loaded."""
    env = os.environ | {"HF_HUB_OFFLINE": "1", THREADS_ENV: str(threads)}
    children = []
    for i in range(procs):
        arg = json.dumps(asdict(p) | {"threads": threads, "part": [i, procs]})
        children.append(
            subprocess.Popen(
                [sys.executable, "-m", "sluicebench.e2e_bench", arg],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
        )
    try:
        for c in children:  # each says "ready" once loaded and warm
            assert c.stdout is not None
            if c.stdout.readline().strip() != "ready":
                raise RuntimeError("an in-process run failed to start (see its stderr)")
        for c in children:
            assert c.stdin is not None
            c.stdin.write("go\n")
            c.stdin.flush()
        parts = []
        for c in children:
            out, _ = c.communicate(timeout=900)
            parts.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.wait()
    wall = max(x["wall_s"] for x in parts)
    seqs = sum(x["sequences"] for x in parts)
    tokens = sum(x["tokens"] for x in parts)
    return {
        "procs": procs,
        "threads": threads,
        "sequences": seqs,
        "tokens": tokens,
        "wall_s": round(wall, 2),
        "rps": round(seqs / wall, 1),
        "tokens_per_s": round(tokens / wall),
        "cpu_pct": round(sum(x["cpu_s"] for x in parts) / wall * 100, 1),
        "rss_mib": round(sum(x["rss_mib"] for x in parts), 1),
    }


def _in_process_main(p: E2EParams, part: int, parts: int) -> dict[str, Any]:
    from sluice.config import load_config
    from workers.handlers import HandlerContext, load_handler_class

    cfg = load_config(EXAMPLE).models[MODEL]
    handler = load_handler_class(cfg.handler)(HandlerContext(MODEL, cfg))
    handler.load()
    texts = sorted((t for _, t in workload(p.texts, p.seed)), key=lambda t: len(t.split()))
    batches = [texts[i : i + p.batch] for i in range(0, len(texts), p.batch)][part::parts]

    def run(batch: list[str]) -> int:
        collated = handler.collate(batch, [len(t.split()) for t in batch])
        handler.postprocess(handler.infer(collated), collated)
        return int(collated.real_tokens)

    for b in batches[-2:]:  # warm: the largest shapes
        run(b)
    print("ready", flush=True)
    sys.stdin.readline()  # "go": every part starts together
    proc = psutil.Process()
    cpu0, start = sum(proc.cpu_times()[:2]), time.perf_counter()
    tokens = sum(run(b) for b in batches)
    wall = time.perf_counter() - start
    return {
        "sequences": sum(len(b) for b in batches),
        "tokens": tokens,
        "wall_s": wall,
        "cpu_s": sum(proc.cpu_times()[:2]) - cpu0,
        "rss_mib": proc.memory_info().rss / 2**20,
    }


def run_e2e(p: E2EParams, log_dir: Path, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Every system in ``p.systems``, in the order (b), (a), (c), (d): (b)'s closed loop
    sets the open-loop rate all served systems are offered."""
    items = workload(p.texts, p.seed)
    threads = p.threads or machine_cores()
    log_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    rate: float | None = None
    order = [s for s in ("best", "example", "in_process", "microbatcher") if s in p.systems]
    for name in order:
        progress(f"e2e: {name} ...")
        if name == "in_process":
            # The limit with the machine's cores: one process of them all, or one
            # process per core (what (b) runs); the better of the two is (c).
            one = in_process(p, 1, threads)
            split = in_process(p, threads, 1) if threads > 1 else one
            results[name] = max(one, split, key=lambda r: r["rps"]) | {
                "tried": [{k: r[k] for k in ("procs", "threads", "rps")} for r in (one, split)]
            }
            continue
        if name == "microbatcher":
            served = start_microbatcher(threads, log_dir)
            target = microbatcher_target(served.url)
        else:
            config = Path(p.best_config) if name == "best" else EXAMPLE
            served = start_up(config, log_dir, name)
            target = sluice_target(served.url)
        try:
            results[name] = drive(served, target, items, p, rate)
        finally:
            served.stop()
        if rate is None:
            rate = results[name]["closed"]["rps"] * p.open_fraction
    return {
        "params": asdict(p),
        "machine_cores": machine_cores(),
        "tokens": sum(len(t.split()) + 2 for _, t in items),  # + [CLS] and [SEP]
        "systems": results,
        "ratios": ratios(results),
    }


def ratios(r: dict[str, Any]) -> dict[str, float | None]:
    def rps(name: str, phase: str = "closed") -> float | None:
        s = r.get(name)
        if s is None:
            return None
        return float(s["rps"] if name == "in_process" else s[phase]["rps"])

    def p99(name: str) -> float | None:
        s = r.get(name)
        return None if s is None else s["open"]["all"]["p99_ms"]

    def div(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a is not None and b else None

    return {
        "example_over_best_closed": div(rps("example"), rps("best")),
        "best_over_in_process_closed": div(rps("best"), rps("in_process")),
        "best_over_microbatcher_closed": div(rps("best"), rps("microbatcher")),
        "open_p99_best_over_microbatcher": div(p99("best"), p99("microbatcher")),
        "open_p99_example_over_best": div(p99("example"), p99("best")),
    }


def render(data: dict[str, Any], console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title=f"sluice bench e2e: {data['params']['texts']} texts, {data['tokens']:,} tokens")
    for col in (
        "system",
        "loop",
        "req/s",
        "errors",
        "short p50/p99",
        "medium p50/p99",
        "long p50/p99",
        "CPU % by process",
        "RSS MiB",
    ):
        t.add_column(col)

    def pair(c: dict[str, Any]) -> str:
        return f"{c['p50_ms']} / {c['p99_ms']}" if c["count"] else "-"

    for name, s in data["systems"].items():
        if name == "in_process":
            shape = f"{s['procs']} x {s['threads']} threads"
            t.add_row(
                name,
                "batches",
                str(s["rps"]),
                "0",
                "-",
                "-",
                "-",
                f"{s['cpu_pct']} ({shape})",
                str(s["rss_mib"]),
            )
            continue
        for loop in ("closed", "open"):
            ph = s[loop]
            cpu = ", ".join(f"{k} {v['cpu_pct']:.0f}" for k, v in sorted(ph["processes"].items()))
            rate = f"{ph['rps']}" + (f" (of {ph['offered_rps']})" if loop == "open" else "")
            t.add_row(
                name,
                loop,
                rate,
                str(ph["errors"]),
                pair(ph["short"]),
                pair(ph["medium"]),
                pair(ph["long"]),
                f"{cpu}; client {ph['client_cpu_pct']:.0f}",
                str(s["rss_mib"]) if loop == "open" else "",
            )
    console.print(t)
    console.print({k: v for k, v in data["ratios"].items() if v is not None})


if __name__ == "__main__":  # one process of the in-process system
    params = json.loads(sys.argv[1])
    params["systems"] = tuple(params["systems"])
    part, parts = params.pop("part")
    print(json.dumps(_in_process_main(E2EParams(**params), part, parts)))
