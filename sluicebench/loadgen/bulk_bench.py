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
time. Nothing here asserts a timing: :func:`summarise` compares A with B.
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from sluice import keys
from sluice.client import Client
from sluice.config import parse_config
from sluice.errors import ConfigError, SluiceError
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.records import BULK_RANK
from sluicebench.loadgen.driver import LoadSpec
from sluicebench.loadgen.stack import Stack
from sluicebench.loadgen.stack_bench import phase
from sluicebench.loadgen.workload import LengthBand, text_of

TARGET_P99_RATIO = 1.10
TARGET_IDLE_SHARE = 0.85  # issue 31 (ADR 0090's benchmark asked 0.70)
SIDES = ("without", "with")


@dataclass(frozen=True)
class Variant:
    """A bulk setting under test: ``models.<m>.bulk.max_batch``, worker prefetch,
    ``models.<m>.bulk.reserve_workers``, ``models.<m>.bulk.idle_reserve`` (ADR 0164)
    and ``models.<m>.bulk.micro_batch`` (ADR 0155:
    0 runs a bulk batch whole; n yields to interactive jobs every n items)."""

    bulk_max_batch: int
    overlap: bool = True
    reserve: int = 0
    micro: int = 0
    idle: int = 0  # bulk.idle_reserve

    @property
    def model(self) -> str:
        # Prefetch is a worker flag, not config: variants differing only in it share a model.
        return (
            f"bulk{self.bulk_max_batch}"
            + (f"r{self.reserve}" if self.reserve else "")
            + (f"m{self.micro}" if self.micro else "")
            + (f"i{self.idle}" if self.idle else "")
        )

    @property
    def name(self) -> str:
        return (
            f"bulk.max_batch {self.bulk_max_batch}"
            + ("" if self.overlap else ", no prefetch")
            + (f", reserve {self.reserve}" if self.reserve else "")
            + (f", yields every {self.micro}" if self.micro else "")
            + (f", idle reserve {self.idle}" if self.idle else "")
        )


def parse_variants(spec: str) -> tuple[Variant, ...]:
    """``"8,2,8:no-overlap,8:reserve2,8:micro1"``: bulk.max_batch values, each
    optionally with ``:no-overlap``, ``:reserveN`` (bulk.reserve_workers),
    ``:microN`` (bulk.micro_batch) and ``:idleN`` (bulk.idle_reserve)."""
    out = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        size, *flags = part.split(":")
        overlap, counts = True, {"reserve": 0, "micro": 0, "idle": 0}
        for flag in flags:
            name = flag.rstrip("0123456789")
            if flag == "no-overlap":
                overlap = False
            elif name in counts and flag[len(name) :].isdigit():
                counts[name] = int(flag[len(name) :])
            else:
                size = ""
        if not size.isdigit() or int(size) < 1:
            raise ConfigError(
                f"variants {spec!r}: expected N[:no-overlap][:reserveK][:microK][:idleK], "
                f"got {part!r}"
            )
        out.append(Variant(int(size), overlap=overlap, **counts))
    if not out:
        raise ConfigError("variants: at least one is needed")
    return tuple(out)


@dataclass(frozen=True)
class BulkParams:
    """Workers, workload, phases; a batch of n sleeps base_ms + per_token_ms x words x n."""

    workers: int = 4
    words: int = 10  # every input, interactive or bulk, has exactly this many words
    base_ms: float = 5.0
    per_token_ms: float = 1.5
    max_batch: int = 8
    bulk_max_queued: int | None = None  # None: the default, 4 x max_batch
    utilisation: float = 0.6
    duration_s: float = 20.0  # per A or B phase, warm-up included
    warmup_s: float = 4.0
    capacity_s: float = 8.0
    # Given: no closed-loop phase, this figure (jobs/s) sets the load. On a shared
    # machine a capacity phase that other work slows sets every later phase wrong.
    capacity_per_s: float | None = None
    bulk_alone_s: float = 6.0
    rounds: int = 2
    # The defaults (prefetch on, bulk batches as large as interactive ones) and
    # docs/benchmarks/bulk.md's balanced setting (no prefetch, bulk batches of 2).
    variants: tuple[Variant, ...] = (Variant(8), Variant(2, overlap=False))
    seed: int = 100

    def batch_ms(self, n: int) -> float:
        return self.base_ms + self.per_token_ms * self.words * n


# -- pure arithmetic ------------------------------------------------------------------
def nominal_capacity(p: BulkParams, batch: int | None = None) -> float:
    """Jobs/s of ``p.workers`` workers that always run full batches of ``batch``."""
    n = batch or p.max_batch
    return p.workers * n * 1000.0 / p.batch_ms(n)


def idle_share(bulk_per_s: float, capacity_per_s: float, utilisation: float) -> float | None:
    """The share of the idle capacity, ``capacity x (1 - utilisation)``, bulk used."""
    idle = capacity_per_s * (1.0 - utilisation)
    return round(bulk_per_s / idle, 3) if idle > 0 else None


def idle_time_share(
    bulk_per_s: float, capacity_per_s: float, busy_without: float | None
) -> float | None:
    """The share bulk used of the time the workers really sat idle without it:
    ``capacity x (1 - busy without bulk)``. Interactive jobs in small batches keep
    the workers busier than ``utilisation`` says (a batch's fixed cost is paid more
    often), so this is the ceiling bulk can reach without making them batch up."""
    if busy_without is None or busy_without >= 1.0:
        return None
    return round(bulk_per_s / (capacity_per_s * (1.0 - busy_without)), 3)


def busy_fraction(
    before: dict[str, tuple[float, int, int]],
    after: dict[str, tuple[float, int, int]],
    base_ms: float,
    per_item_ms: float,
) -> float | None:
    """Mean share of wall time the workers' model was busy between two heartbeat reads.

    Each read maps worker id -> (heartbeat_at s, batches, jobs); a batch of n items
    takes base_ms + per_item_ms x n. Per worker over its own heartbeat interval,
    so a heartbeat that is up to heartbeat_s old at a read costs no accuracy.
    """
    shares = []
    for wid, (t1, b1, j1) in after.items():
        if wid not in before:
            continue
        t0, b0, j0 = before[wid]
        if t1 - t0 <= 0:
            continue
        busy_ms = (b1 - b0) * base_ms + (j1 - j0) * per_item_ms
        shares.append(busy_ms / ((t1 - t0) * 1000.0))
    return round(sum(shares) / len(shares), 3) if shares else None


def ratio(num: float | None, den: float | None) -> float | None:
    return round(num / den, 3) if num is not None and den else None


def median(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return round(statistics.median(vals), 3) if vals else None


def verdict(p99_ratio: float | None, share: float | None) -> dict[str, bool | None]:
    """Each target met (True), missed (False) or not measured (None)."""
    return {
        "p99_within": None if p99_ratio is None else p99_ratio <= TARGET_P99_RATIO,
        "idle_share": None if share is None else share >= TARGET_IDLE_SHARE,
    }


def check_output(rows: list[dict[str, Any]], counts: dict[str, Any]) -> dict[str, Any]:
    """An ended bulk job's output against its counts: one line per input line, in
    order, each with its own custom_id (``l<index>``), as many succeeded as counted."""
    by_status: dict[str, int] = {}
    for r in rows:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
    in_order = [r["line"] for r in rows] == list(range(1, len(rows) + 1))
    ids_match = all(r["custom_id"] == f"l{r['line'] - 1}" for r in rows)
    ok = (
        in_order
        and ids_match
        and len(rows) == counts["total"]
        and by_status.get("succeeded", 0) == counts["succeeded"]
    )
    return {
        "lines": len(rows),
        "by_status": dict(sorted(by_status.items())),
        "in_order": in_order,
        "custom_ids_match": ids_match,
        "ok": ok,
    }


@dataclass(frozen=True, slots=True)
class Ran:
    """An interactive job that succeeded: its batch ((claim ms, completion ms, run_ms)
    as its hash stores them, the same for every job of one batch) and its run time."""

    batch: tuple[str, str, str]
    run_ms: float


def batch_check(
    jobs: list[Ran], max_batch: int, base_ms: float, per_item_ms: float
) -> dict[str, Any]:
    """Interactive batches as they ran: how large, and how many held more items than
    their interactive jobs (the synthetic run time tells the true size). ADR 0090:
    an interactive batch never includes a bulk item, so that count must be 0."""
    sizes = Counter(j.batch for j in jobs)
    run_ms = {j.batch: j.run_ms for j in jobs}
    others = [round((run_ms[k] - base_ms) / per_item_ms) - n for k, n in sizes.items()]
    return {
        "batches": len(sizes),
        "mean_size": round(len(jobs) / len(sizes), 2) if sizes else None,
        "over_limit": sum(1 for n in sizes.values() if n > max_batch),
        "with_other_items": sum(1 for x in others if x >= 1),
        "max_other_items": max(others, default=0),
    }


def _breaks(c: dict[str, Any]) -> int:
    return int(c["over_limit"] + c["with_other_items"])


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant's A/B rounds: medians of each side and of the paired ratios.

    A round's ratio compares two phases run seconds apart on the same seeded load,
    so a slow drift of the shared machine cancels in it; the verdict uses those.
    """

    def side(key: str, fig: str) -> list[float | None]:
        return [r[key][fig] for r in rounds]

    def paired(fig: str) -> list[float | None]:
        return [ratio(r["with"][fig], r["without"][fig]) for r in rounds]

    p99_ratios, p50_ratios = paired("e2e_p99_ms"), paired("e2e_p50_ms")
    out: dict[str, Any] = {
        "rounds": len(rounds),
        "without_p50_ms": median(side("without", "e2e_p50_ms")),
        "without_p99_ms": median(side("without", "e2e_p99_ms")),
        "with_p50_ms": median(side("with", "e2e_p50_ms")),
        "with_p99_ms": median(side("with", "e2e_p99_ms")),
        "without_wait_p99_ms": median(side("without", "wait_p99_ms")),
        "with_wait_p99_ms": median(side("with", "wait_p99_ms")),
        "p50_ratio": median(p50_ratios),
        "p99_ratio": median(p99_ratios),
        "p99_ratio_per_round": p99_ratios,
        "bulk_per_s": median([r["with"]["bulk"]["per_s"] for r in rounds]),
        "idle_share": median([r["with"]["bulk"]["idle_share"] for r in rounds]),
        "idle_time_share": median([r["with"]["bulk"].get("idle_time_share") for r in rounds]),
        "busy_without": median(side("without", "busy_fraction")),
        "busy_with": median(side("with", "busy_fraction")),
        "without_hold_mean_ms": median(side("without", "hold_mean_ms")),
        "with_hold_mean_ms": median(side("with", "hold_mean_ms")),
        "outputs_ok": all(r["with"]["bulk"].get("output", {}).get("ok", True) for r in rounds),
        "batch_without": median([r["without"]["batches"]["mean_size"] for r in rounds]),
        "batch_with": median([r["with"]["batches"]["mean_size"] for r in rounds]),
        "batch_rule_breaks": sum(_breaks(r[k]["batches"]) for r in rounds for k in SIDES),
    }
    return out | {"met": verdict(out["p99_ratio"], out["idle_share"])}


# -- the stack ------------------------------------------------------------------------
def bulk_config(p: BulkParams) -> dict[str, Any]:
    def model(v: Variant) -> dict[str, Any]:
        bulk: dict[str, Any] = {"max_batch": v.bulk_max_batch, "reserve_workers": v.reserve}
        if v.micro:
            bulk["micro_batch"] = v.micro
        if v.idle:
            bulk["idle_reserve"] = v.idle
        if p.bulk_max_queued is not None:
            bulk["max_queued"] = p.bulk_max_queued
        return {
            "handler": "synthetic",
            "params": {"base_ms": p.base_ms, "per_token_ms": p.per_token_ms},
            "buckets": [p.words],
            "cost": {"method": "words"},
            "batching": {
                "max_batch": p.max_batch,
                "max_batch_tokens": p.max_batch * p.words,
                "service_ms_base": p.base_ms,
                "service_ms_per_cost": p.per_token_ms,
            },
            "autoscaling": {"min_replicas": 0, "max_replicas": 64},
            "bulk": bulk,
        }

    # Heartbeats every 0.5 s: the busy fractions are read from their counters.
    return {"models": {v.model: model(v) for v in p.variants}, "worker": {"heartbeat_s": 0.5}}


def bulk_file(p: BulkParams, lines: int) -> bytes:
    rng = random.Random(p.seed)
    rows = (
        json.dumps({"input": text_of(p.words, rng), "custom_id": f"l{i}"}) for i in range(lines)
    )
    return ("\n".join(rows) + "\n").encode()


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
