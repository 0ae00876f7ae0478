"""Bulk jobs (ADR 0090): interactive p99 with and without a concurrent bulk job.

sluice bench bulk [--variants 8,2:no-overlap] [--rounds 2] [--duration-s 20]
                               [--workers 4] [--base-ms 5] [--per-token-ms 1.5]
                               [--words 10] [--max-batch 8] [--utilisation 0.6]
                               [--max-queued N] [--json bench/results/bulk.json]

A variant is a ``bulk.max_batch`` value, optionally ``:no-overlap`` (workers
without prefetch), ``:reserveN`` (``bulk.reserve_workers``), ``:microN``
(``bulk.micro_batch``: yield to interactive jobs every N items, ADR 0155) and
``:idleN`` (``bulk.idle_reserve``: bulk only while N other workers are idle, ADR
0164): ``--variants 8,2,1,8:no-overlap,8:reserve1,8:micro1,8:micro1:idle1``. Logic in
sluicebench/loadgen/bulk_bench.py; about 3.5 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from sluice.errors import ConfigError
from sluicebench.loadgen.bulk_bench import run_bulk
from sluicebench.loadgen.bulk_figures import TARGET_IDLE_SHARE, BulkParams, parse_variants


def _n(x: Any, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _met(x: bool | None) -> str:
    return "-" if x is None else ("met" if x else "missed")


COLUMNS = (
    "variant",
    "bulk alone/s",
    "p50 w/o",
    "p50 with",
    "p99 w/o",
    "p99 with",
    "p99 ratio",
    "wait p99 w/o",
    "wait p99 with",
    "bulk/s",
    "share of idle",
    "of idle time",
    "busy w/o",
    "busy with",
    "p99 <= 1.10x",
    f"share >= {TARGET_IDLE_SHARE:.2f}",
)


def _heading(data: dict[str, Any]) -> str:
    p, cap = data["params"], data["capacity"]
    return (
        f"[bold]Bulk benchmark[/]: {p['workers']} synthetic workers, max_batch {p['max_batch']}, "
        f"batch ms = {p['base_ms']} + {p['per_token_ms']} x {p['words']} words x n; capacity "
        f"[bold]{cap['measured_per_s']:.1f}[/] jobs/s "
        f"{'given' if cap.get('given') else 'measured'} ({cap['nominal_per_s']:.1f} "
        f"nominal, {_n(cap['measured_over_nominal'], 2)}); interactive at "
        f"{p['utilisation']:.0%}; idle capacity {data['idle_per_s']:.1f} jobs/s; "
        f"{p['rounds']} A/B round(s) of {p['duration_s']:.0f} s ({p['warmup_s']:.0f} s warm-up)"
    )


def _row(v: dict[str, Any]) -> list[str]:
    s = v["summary"]
    return [
        v["name"],
        _n(v["bulk_alone"]["per_s"]),
        _n(s["without_p50_ms"]),
        _n(s["with_p50_ms"]),
        _n(s["without_p99_ms"]),
        _n(s["with_p99_ms"]),
        _n(s["p99_ratio"], 2),
        _n(s["without_wait_p99_ms"]),
        _n(s["with_wait_p99_ms"]),
        _n(s["bulk_per_s"]),
        _n(s["idle_share"], 2),
        _n(s.get("idle_time_share"), 2),
        _n(s["busy_without"], 2),
        _n(s["busy_with"], 2),
        _met(s["met"]["p99_within"]),
        _met(s["met"]["idle_share"]),
    ]


def _rounds_line(v: dict[str, Any]) -> str:
    per = ", ".join(
        f"A {r['without']['e2e_p99_ms']:.0f} B {r['with']['e2e_p99_ms']:.0f} "
        f"({r['with']['bulk']['per_s']:.0f}/s, errors "
        f"{sum(r['without']['errors'].values()) + sum(r['with']['errors'].values())})"
        for r in v["rounds"]
    )
    s = v["summary"]
    return (
        f"  {v['name']}: p99 per round {per}; claim-to-start mean "
        f"{_n(s['without_hold_mean_ms'])} / {_n(s['with_hold_mean_ms'])} ms; interactive "
        f"batch mean {_n(s['batch_without'], 2)} / {_n(s['batch_with'], 2)}; batches that "
        f"look mixed or too large (heuristic, A and B): {s['batch_rule_breaks']}; bulk "
        "outputs complete: "
        f"{s['outputs_ok']}"
    )


def print_report(data: dict[str, Any], console: Console) -> None:
    console.print(_heading(data))
    t = Table(
        title="Interactive latency (ms, end to end) without / with a bulk job", box=box.SIMPLE_HEAD
    )
    for name in COLUMNS:
        t.add_column(name, justify="right")
    for v in data["variants"]:
        t.add_row(*_row(v))
    console.print(t)
    console.print(
        "medians over the rounds; p99 ratio = median of each round's with / without; "
        "busy = share of time the workers' model slept in a batch; share of idle = bulk / "
        "(capacity x (1 - utilisation)); of idle time = bulk / (capacity x (1 - busy w/o))"
    )
    for v in data["variants"]:
        console.print(_rounds_line(v))


def main(argv: list[str] | None = None) -> None:
    d = BulkParams()
    ap = argparse.ArgumentParser(
        prog="sluice bench bulk", description=(__doc__ or "").splitlines()[0]
    )
    ap.add_argument(
        "--variants",
        default="8,2:no-overlap",
        help="bulk.max_batch values[:no-overlap][:reserveN][:microN]",
    )
    ap.add_argument("--rounds", type=int, default=d.rounds, help="A/B pairs per variant")
    ap.add_argument("--duration-s", type=float, default=d.duration_s, help="s per phase")
    ap.add_argument("--warmup-s", type=float, default=d.warmup_s)
    ap.add_argument("--workers", type=int, default=d.workers)
    ap.add_argument("--base-ms", type=float, default=d.base_ms)
    ap.add_argument("--per-token-ms", type=float, default=d.per_token_ms)
    ap.add_argument("--words", type=int, default=d.words, help="words per input (all inputs)")
    ap.add_argument("--max-batch", type=int, default=d.max_batch)
    ap.add_argument("--utilisation", type=float, default=d.utilisation)
    ap.add_argument("--max-queued", type=int, default=None, help="bulk.max_queued")
    ap.add_argument(
        "--capacity", type=float, default=None, help="jobs/s: skip the capacity phase, use this"
    )
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/sluice-bench-bulk"))
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--json", dest="json_path", type=Path)
    a = ap.parse_args(argv)
    try:
        params = BulkParams(
            workers=a.workers,
            words=a.words,
            base_ms=a.base_ms,
            per_token_ms=a.per_token_ms,
            max_batch=a.max_batch,
            bulk_max_queued=a.max_queued,
            capacity_per_s=a.capacity,
            utilisation=a.utilisation,
            duration_s=a.duration_s,
            warmup_s=a.warmup_s,
            rounds=a.rounds,
            variants=parse_variants(a.variants),
            seed=a.seed,
        )
    except ConfigError as e:
        sys.exit(f"error: {e}")
    a.workdir.mkdir(parents=True, exist_ok=True)
    out = run_bulk(a.workdir, params, progress=not a.no_progress)
    print_report(out, Console() if sys.stdout.isatty() else Console(width=200))
    if a.json_path:
        a.json_path.parent.mkdir(parents=True, exist_ok=True)
        a.json_path.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
