"""The soak: the real stack at 70% of its capacity for a long while, sampled as it goes.

A private redis-server, one gateway, N synthetic workers and the autoscaler
in dry-run (it observes, reclaims and decides, but the workers stay the N this
run started, so each one's memory can be followed), each started through the
``sluice`` CLI (:class:`sluicebench.loadgen.stack.Stack`). The run:

1. capacity: nominal from the synthetic handler (``max_batch x 1000 / base_ms``
   jobs/s per worker), verified by a short closed loop at saturation; the lower
   of the two is the capacity (the stack's own overhead shows as the gap);
2. soak: an open loop (Poisson) at ``load_fraction`` of it for ``duration_s``,
   with a sample every ``sample_s`` (process RSS and fds, Redis memory, DBSIZE,
   keys per family, the gateway's metric series, the load of the last window);
3. after: the load stops; once the result and idempotency TTLs have passed,
   every job hash and idempotency key must be gone and the queues empty.

The soak config sets short TTLs so that expiry is exercised within the run.
The criteria are in :mod:`sluicebench.loadgen.soak_verdict`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluicebench.loadgen.driver import Driver, LoadSpec, run_load
from sluicebench.loadgen.soak_sample import Probe, Sample, wait_until
from sluicebench.loadgen.soak_verdict import Limits, verdict
from sluicebench.loadgen.stack import Stack
from sluicebench.loadgen.stats import OK_STATUSES, Outcome, error_causes, percentile
from sluicebench.loadgen.workload import LengthBand

MODEL = "soak"
BUCKETS = [32, 128]
# Two buckets in use: mostly short inputs, some medium (all fit the 128 bucket).
BANDS = (LengthBand(5, 20, 0.8), LengthBand(40, 100, 0.2))


@dataclass(frozen=True)
class SoakParams:
    workers: int = 2
    base_ms: float = 20.0  # synthetic batch time: one worker is ~1000 / base_ms jobs/s
    max_batch: int = 1
    duration_s: float = 600.0
    warmup_s: float = 60.0
    sample_s: float = 5.0
    load_fraction: float = 0.7
    capacity_s: float = 8.0  # the closed-loop capacity check
    result_ttl_s: int = 30
    idempotency_ttl_s: int = 30
    idempotency_fraction: float = 0.2
    max_rss_growth_pct: float = 10.0
    seed: int = 1
    progress: bool = True

    @property
    def nominal_per_s(self) -> float:
        return self.workers * self.max_batch * 1000.0 / self.base_ms


def soak_config(p: SoakParams) -> dict[str, Any]:
    model = {
        "handler": "synthetic",
        "params": {"base_ms": p.base_ms, "per_token_ms": 0},
        "buckets": BUCKETS,
        "cost": {"method": "words"},
        "queue": {"result_ttl_s": p.result_ttl_s, "idempotency_ttl_s": p.idempotency_ttl_s},
        "batching": {
            "max_batch": p.max_batch,
            "max_batch_tokens": BUCKETS[-1] * p.max_batch,
            "service_ms_base": p.base_ms,
        },
        "autoscaling": {"min_replicas": 0, "max_replicas": 64},
    }
    return {"models": {MODEL: model}}


def _window(outcomes: list[Outcome], start: int) -> dict[str, Any]:
    """What the jobs that ended since the last sample saw."""
    new = outcomes[start:]
    ok = [o.e2e_ms for o in new if o.status in OK_STATUSES]
    p50 = round(percentile(ok, 50), 2) if ok else None
    p99 = round(percentile(ok, 99), 2) if ok else None
    # Errors by cause: an HTTP status ("503"), "timeout", "transport" or "job_<status>".
    return {"done": len(new), "errors": error_causes(new), "e2e_p50_ms": p50, "e2e_p99_ms": p99}


Sampled = tuple[dict[str, Any], list[Sample]]


async def _sampled(spec: LoadSpec, probe: Probe, every_s: float) -> Sampled:
    """Run the load and sample alongside it; the samples' clock starts with the load."""
    driver = Driver(spec)
    t0 = time.monotonic()
    task = asyncio.create_task(driver.run())
    samples: list[Sample] = []
    seen = 0
    while True:
        win = _window(driver.outcomes, seen)
        seen += win["done"]
        samples.append(await asyncio.to_thread(probe.sample, time.monotonic() - t0, win))
        next_at = t0 + len(samples) * every_s
        done, _ = await asyncio.wait({task}, timeout=max(0.0, next_at - time.monotonic()))
        if done:
            return task.result(), samples


def _run_async(spec: LoadSpec, probe: Probe, every_s: float) -> Sampled:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_sampled(spec, probe, every_s))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_sampled(spec, probe, every_s))


def _pids(st: Stack) -> dict[str, int]:
    pids = {p.role: p.proc.pid for p in st.procs if p.role in ("gateway", "autoscaler")}
    for i, p in enumerate(st.workers(MODEL), 1):
        pids[f"worker-{i}"] = p.proc.pid
    if st.redis is not None and st.redis.proc is not None:
        pids["redis"] = st.redis.proc.pid
    return pids


def _capacity(st: Stack, p: SoakParams) -> dict[str, Any]:
    spec = LoadSpec(
        url=st.url,
        model=MODEL,
        concurrency=max(16, 6 * p.workers * p.max_batch),
        duration_s=p.capacity_s,
        warmup_s=min(2.0, p.capacity_s / 4),
        bands=BANDS,
        seed=p.seed + 1000,
        progress=p.progress,
        label="capacity",
    )
    out = run_load(spec)
    measured = out["throughput_per_s"]
    capacity = min(measured, p.nominal_per_s) if measured > 0 else p.nominal_per_s
    return {
        "nominal_per_s": p.nominal_per_s,
        "measured_per_s": measured,
        "measured_over_nominal": round(measured / p.nominal_per_s, 3),
        "capacity_per_s": capacity,
        "errors": out["errors"],
    }


def _after(st: Stack, probe: Probe, p: SoakParams, t0: float) -> dict[str, Any]:
    """Once the TTLs have passed: counters, leftovers and a last sample."""

    def expired() -> bool:
        fam = probe.sample(0.0).families
        return fam["job"] == 0 and fam["idempotency"] == 0

    wait_until(expired, max(p.result_ttl_s, p.idempotency_ttl_s) + 20.0, every_s=1.0)
    assert st.redis is not None
    client = connect(st.redis.url)
    try:
        stats = QueueClient(client, dict(_models(p))).stats(MODEL)
    finally:
        client.close()
    last = probe.sample(time.monotonic() - t0)
    return {
        "counters": stats.counters,
        "queued": stats.queued,
        "in_flight": stats.in_flight,
        "dead_lettered": stats.dead_lettered,
        "job_keys": last.families["job"],
        "idempotency_keys": last.families["idempotency"],
        "waiters": last.waiters,
        "sample": last.to_json(),
    }


def _models(p: SoakParams) -> dict[str, Any]:
    from sluice.config import parse_config

    return dict(parse_config(soak_config(p)).models)


def run_soak(workdir: Path, p: SoakParams) -> dict[str, Any]:
    """The whole soak; returns the JSON document (params, capacity, samples, verdict)."""
    workdir.mkdir(parents=True, exist_ok=True)
    cfg_path = workdir / "soak.yaml"
    cfg_path.write_text(yaml.safe_dump(soak_config(p)))
    with Stack(cfg_path, workdir / "logs") as st:
        st.add_workers(MODEL, p.workers)
        st.add_autoscaler()  # dry-run: soaked too, and it writes its decision keys
        cap = _capacity(st, p)
        rate = round(p.load_fraction * cap["capacity_per_s"], 1)
        probe = Probe(st.redis.url if st.redis else "", [MODEL], _pids(st), st.url)
        spec = LoadSpec(
            url=st.url,
            model=MODEL,
            rate=rate,
            duration_s=p.duration_s,
            warmup_s=p.warmup_s,
            bands=BANDS,
            seed=p.seed,
            progress=p.progress,
            idempotency_fraction=p.idempotency_fraction,
            label=f"soak at {rate}/s",
        )
        t0 = time.monotonic()
        try:
            load, samples = _run_async(spec, probe, p.sample_s)
            final = _after(st, probe, p, t0)
        finally:
            probe.close()
    lim = Limits(
        warmup_s=p.warmup_s,
        duration_s=p.duration_s,
        rate_per_s=rate,
        result_ttl_s=p.result_ttl_s,
        idempotency_ttl_s=p.idempotency_ttl_s,
        idempotency_fraction=p.idempotency_fraction,
        buckets=len(BUCKETS),
        max_rss_growth_pct=p.max_rss_growth_pct,
    )
    rows = [s.to_json() for s in samples]
    return {
        "params": asdict(p),
        "config": soak_config(p)["models"][MODEL],
        "rate_per_s": rate,
        "capacity": cap,
        "load": load,
        "samples": rows,
        "final": final,
        "verdict": verdict([*rows, final["sample"]], lim, load, final),
    }


def quick_params(**overrides: Any) -> SoakParams:
    """The suite's 60-second soak (tests/*/soak): short TTLs, short warm-up, 2 s samples."""
    base = SoakParams(
        duration_s=60.0,
        warmup_s=20.0,
        sample_s=2.0,
        result_ttl_s=10,
        idempotency_ttl_s=10,
        capacity_s=5.0,
        progress=False,
    )
    return replace(base, **overrides)
