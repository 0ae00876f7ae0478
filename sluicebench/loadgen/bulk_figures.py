"""The bulk benchmark's parameters, variants, stack config and arithmetic (pure: no
stack, no clock): what :mod:`sluicebench.loadgen.bulk_bench` runs and how it sums up a
variant's A/B rounds against ADR 0090's targets."""

from __future__ import annotations

import json
import random
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from sluice.errors import ConfigError
from sluicebench.loadgen.workload import text_of

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
