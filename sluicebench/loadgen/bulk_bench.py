"""Bulk benchmark (ADR 0090): interactive latency with and without a bulk job running.

The issue's target: at 60% interactive load, interactive p99 (end to end) within
10% of its value without bulk, while the bulk job uses at least 70% of the idle
capacity. One stack (private Redis, a gateway, a fixed number of synthetic
workers, one ``sluice bulk worker``; no autoscaler, so capacity is constant):

1. capacity: closed-loop interactive throughput with full batches, beside the
   nominal figure the synthetic parameters give;
2. per variant (``bulk.max_batch``, worker prefetch on or off,
   ``bulk.reserve_workers``; each a model of its own in one config): the bulk
   job alone (its ceiling), then ``rounds`` pairs of the same seeded Poisson
   load at ``utilisation`` x capacity, without (A) and with (B) a bulk job
   started before the phase and cancelled after it.

Bulk items are the interactive inputs' size (``words`` words, one bucket), so
capacity, interactive jobs and bulk lines share one unit: jobs/s. Idle capacity
is ``capacity x (1 - utilisation)``. The workers' heartbeat counters give how
busy the (sleeping) model was in each phase's window, from the synthetic batch
time. Nothing here asserts a timing: :func:`~sluicebench.loadgen.bulk_figures.summarise`
compares A with B (the parameters and arithmetic live in
:mod:`sluicebench.loadgen.bulk_figures`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from sluice import keys
from sluice.client import Client
from sluice.config import parse_config
from sluice.errors import SluiceError
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.records import BULK_RANK
from sluicebench.loadgen.bulk_figures import (
    TARGET_IDLE_SHARE,
    TARGET_P99_RATIO,
    BulkParams,
    Ran,
    Variant,
    batch_check,
    bulk_config,
    bulk_file,
    busy_fraction,
    check_output,
    idle_share,
    idle_time_share,
    nominal_capacity,
    ratio,
    summarise,
)
from sluicebench.loadgen.driver import LoadSpec
from sluicebench.loadgen.stack import Stack
from sluicebench.loadgen.stack_bench import phase
from sluicebench.loadgen.workload import LengthBand


@dataclass
class _Bench:
    """The running stack and what every phase needs."""

    st: Stack
    p: BulkParams
    http: Client
    queue: QueueClient
    data: bytes
    base: LoadSpec

    def counters(self, model: str) -> dict[str, tuple[float, int, int]]:
        raw = self.queue.redis.hgetall(keys.workers_info_key(model))
        infos = (json.loads(v) for v in raw.values())
        return {
            i["id"]: (float(i["heartbeat_at"]), int(i["batches"]), int(i["jobs"])) for i in infos
        }

    def ran(self, model: str, since_ms: int, until_ms: int) -> list[Ran]:
        """Interactive jobs of model that succeeded, claimed in [since_ms, until_ms]
        (Redis clock). Succeeded bulk items are gone: gathering deletes them."""
        fields = ("status", "prio", "start", "fin", "run_ms")
        names = list(self.queue.redis.scan_iter(match=keys.job_prefix(model) + "*", count=1000))
        pipe = self.queue.redis.pipeline(transaction=False)
        for name in names:
            pipe.hmget(name, *fields)
        out = []
        for status, prio, start, fin, run_ms in pipe.execute():
            if (
                status == "succeeded"
                and int(prio) < BULK_RANK
                and since_ms <= int(start) <= until_ms
            ):
                out.append(Ran((start, fin, run_ms), float(run_ms)))
        return out

    def busy(self, before: dict[str, Any], after: dict[str, Any]) -> float | None:
        return busy_fraction(before, after, self.p.base_ms, self.p.per_token_ms * self.p.words)

    def start_bulk(self, model: str, timeout_s: float = 30.0) -> str:
        """Upload the bulk file; return once its first lines are done (it is flowing)."""
        bulk_id = str(self.http.bulk_submit(model, self.data)["id"])
        deadline = time.monotonic() + timeout_s
        while self.http.bulk_get(bulk_id)["counts"]["done"] == 0:
            if time.monotonic() > deadline:
                raise SluiceError(f"bulk job {bulk_id}: no line done within {timeout_s}s")
            time.sleep(0.1)
        return bulk_id

    def stop_bulk(self, model: str, bulk_id: str, timeout_s: float = 60.0) -> dict[str, Any]:
        """Cancel, wait for the end, then for the queues to empty; the final counts and
        the output file checked against them."""
        self.http.bulk_cancel(bulk_id)
        view = self.http.bulk_wait(bulk_id, timeout_s=timeout_s, poll_s=0.1)
        final = {"state": view["state"], **view["counts"]}
        final["output"] = check_output(list(self.http.bulk_output(bulk_id)), view["counts"])
        deadline = time.monotonic() + timeout_s
        while True:
            s = self.queue.stats(model)
            if s.in_flight == 0 and sum(b.queued for b in s.buckets) == 0:
                return final
            if time.monotonic() > deadline:
                raise SluiceError(f"{model}: queues not empty {timeout_s}s after the cancel")
            time.sleep(0.1)


@dataclass
class _Probe:
    """Reads the bulk job's done count and the worker counters at two instants."""

    read: Callable[[], dict[str, Any]]
    at_s: tuple[float, float]
    samples: list[dict[str, Any]] = field(default_factory=list)

    def start(self) -> threading.Thread:
        t0 = time.monotonic()

        def run() -> None:
            for at in self.at_s:
                time.sleep(max(0.0, t0 + at - time.monotonic()))
                self.samples.append(self.read() | {"t": time.monotonic()})

        thread = threading.Thread(target=run, name="bulk-bench-probe", daemon=True)
        thread.start()
        return thread


def _hold_mean(out: dict[str, Any]) -> float | None:
    """Mean ms between a job's claim and its batch's start: a prefetched batch waits
    there for the batch running before it (server time - queue wait - run, means)."""
    parts = [out[k]["mean"] for k in ("server_ms", "queue_wait_ms", "run_ms")]
    if any(x is None for x in parts):
        return None
    return round(parts[0] - parts[1] - parts[2], 1)


def _brief(out: dict[str, Any]) -> dict[str, Any]:
    e2e, wait = out["e2e_ms"], out["queue_wait_ms"]
    return {
        "rate_per_s": out["spec"]["rate"],
        "throughput_per_s": out["throughput_per_s"],
        "jobs": out["jobs"],
        "e2e_p50_ms": e2e["p50"],
        "e2e_p99_ms": e2e["p99"],
        "e2e_max_ms": e2e["max"],
        "wait_p50_ms": wait["p50"],
        "wait_p99_ms": wait["p99"],
        "run_p50_ms": out["run_ms"]["p50"],
        "run_p99_ms": out["run_ms"]["p99"],
        "hold_mean_ms": _hold_mean(out),
        "errors": out["errors"],
        "send_lag_p99_ms": out["send_lag_ms"]["p99"],
        "cpu_cores": out["cpu"]["cores"],
        "machine_busy_cores": out["cpu"]["machine_busy_cores"],
        "others_cores": out["cpu"]["others_cores"],
    }


def _interactive(
    b: _Bench, v: Variant, spec: LoadSpec, bulk_id: str | None, capacity: float
) -> dict[str, Any]:
    """One A or B phase; the probe reads at the driver's measurement window."""

    def read() -> dict[str, Any]:
        done = b.http.bulk_get(bulk_id)["counts"]["done"] if bulk_id else None
        return {"done": done, "workers": b.counters(v.model)}

    probe = _Probe(read, (spec.warmup_s, spec.duration_s or 0.0))
    since_ms = int(time.time() * 1000)
    thread = probe.start()
    res = _brief(phase(b.st, spec))
    thread.join()
    ran = b.ran(v.model, since_ms, int(time.time() * 1000))
    res["batches"] = batch_check(ran, b.p.max_batch, b.p.base_ms, b.p.per_token_ms * b.p.words)
    s0, s1 = probe.samples
    res["busy_fraction"] = b.busy(s0["workers"], s1["workers"])
    if bulk_id:
        span = s1["t"] - s0["t"]
        per_s = round((s1["done"] - s0["done"]) / span, 2)
        res["bulk"] = {
            "lines_done": s1["done"] - s0["done"],
            "window_s": round(span, 2),
            "per_s": per_s,
            "idle_share": idle_share(per_s, capacity, b.p.utilisation),
        }
    return res


def _bulk_alone(b: _Bench, v: Variant) -> dict[str, Any]:
    """The bulk job with no interactive load: its ceiling on these workers."""
    bulk_id = b.start_bulk(v.model)
    time.sleep(1.0)  # past the first, partly filled, gathering polls
    s0 = {
        "done": b.http.bulk_get(bulk_id)["counts"]["done"],
        "w": b.counters(v.model),
        "t": time.monotonic(),
    }
    time.sleep(b.p.bulk_alone_s)
    s1 = {
        "done": b.http.bulk_get(bulk_id)["counts"]["done"],
        "w": b.counters(v.model),
        "t": time.monotonic(),
    }
    final = b.stop_bulk(v.model, bulk_id)
    per_s = round((s1["done"] - s0["done"]) / (s1["t"] - s0["t"]), 2)
    return {
        "per_s": per_s,
        "nominal_per_s": round(nominal_capacity(b.p, v.bulk_max_batch), 2),
        "busy_fraction": b.busy(s0["w"], s1["w"]),
        "final": final,
    }


def _variant(b: _Bench, v: Variant, capacity: float) -> dict[str, Any]:
    p = b.p
    rate = round(p.utilisation * capacity, 1)
    b.st.add_workers(v.model, p.workers, extra_args=() if v.overlap else ("--no-overlap",))
    alone = _bulk_alone(b, v)
    rounds = []
    for r in range(p.rounds):
        spec = replace(
            b.base,
            model=v.model,
            concurrency=None,
            rate=rate,
            seed=p.seed + r,
            duration_s=p.duration_s,
            warmup_s=p.warmup_s,
        )
        a = _interactive(
            b, v, replace(spec, label=f"{v.name}: A{r + 1} without bulk"), None, capacity
        )
        bulk_id = b.start_bulk(v.model)
        w = _interactive(
            b, v, replace(spec, label=f"{v.name}: B{r + 1} with bulk"), bulk_id, capacity
        )
        final = b.stop_bulk(v.model, bulk_id)
        w["bulk"]["idle_time_share"] = idle_time_share(
            w["bulk"]["per_s"], capacity, a["busy_fraction"]
        )
        w["bulk"]["output"] = final.pop("output")
        w["bulk"]["final"] = final
        rounds.append({"round": r + 1, "without": a, "with": w})
    b.st.stop_workers(v.model)
    return {
        "variant": asdict(v),
        "name": v.name,
        "model": v.model,
        "rate_per_s": rate,
        "bulk_alone": alone,
        "rounds": rounds,
        "summary": summarise(rounds),
    }


def _capacity(b: _Bench, v: Variant) -> dict[str, Any]:
    """Closed loop with enough jobs outstanding that every worker runs full batches."""
    p = b.p
    b.st.add_workers(v.model, p.workers, extra_args=() if v.overlap else ("--no-overlap",))
    conc = 3 * p.workers * p.max_batch  # a batch running, one prefetched, one queued
    out = phase(
        b.st,
        replace(
            b.base,
            model=v.model,
            concurrency=conc,
            duration_s=p.capacity_s,
            warmup_s=2.0,
            label="capacity (closed loop)",
        ),
    )
    b.st.stop_workers(v.model)
    nominal = nominal_capacity(p)
    return {
        "measured_per_s": out["throughput_per_s"],
        "nominal_per_s": round(nominal, 2),
        "measured_over_nominal": ratio(out["throughput_per_s"], nominal),
        "concurrency": conc,
        "errors": out["errors"],
    }


def _given(p: BulkParams) -> dict[str, Any]:
    """``--capacity``: the load is set from this figure, no capacity phase runs."""
    given = float(p.capacity_per_s or 0.0)
    nominal = nominal_capacity(p)
    return {
        "measured_per_s": given,
        "nominal_per_s": round(nominal, 2),
        "measured_over_nominal": ratio(given, nominal),
        "given": True,
    }


def run_bulk(workdir: Path, p: BulkParams, progress: bool = True) -> dict[str, Any]:
    """The whole benchmark; returns the JSON document."""
    cfg = bulk_config(p)
    cfg_path = workdir / "bulk.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    # Enough lines that the bulk job outlasts a phase even if it had every worker.
    lines = int(nominal_capacity(p) * (p.duration_s + 15.0)) + 1000
    base = LoadSpec(url="", model="", bands=(LengthBand(p.words, p.words, 1.0),), progress=progress)
    with Stack(cfg_path, workdir / "logs-bulk") as st:
        st.spawn("bulk-worker", ["bulk", "worker"])  # `sluice bulk worker`, stopped by close()
        with Client(st.url) as http:
            assert st.redis is not None
            queue = QueueClient(connect(st.redis.url), dict(parse_config(cfg).models))
            b = _Bench(st, p, http, queue, bulk_file(p, lines), replace(base, url=st.url))
            capacity = _capacity(b, p.variants[0]) if p.capacity_per_s is None else _given(p)
            cap = float(capacity["measured_per_s"])
            variants = [_variant(b, v, cap) for v in p.variants]
    return {
        "params": asdict(p),
        "config": cfg,
        "bulk_lines": lines,
        "capacity": capacity,
        "idle_per_s": round(cap * (1 - p.utilisation), 2),
        "variants": variants,
        "targets": {"p99_ratio_max": TARGET_P99_RATIO, "idle_share_min": TARGET_IDLE_SHARE},
    }
