"""Tables for the stack benchmarks (``sluice bench stack``)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table


def _n(x: Any, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _cores(c: dict[str, float]) -> str:
    return " ".join(f"{k[:2]}{v:.2f}" for k, v in sorted(c.items()))


def print_scaling(data: dict[str, Any], console: Console) -> None:
    cap = data["submit_capacity"]
    console.print(
        f"[bold]Benchmark 1[/]: synthetic workers, max_batch {data['max_batch']}, base_ms "
        f"{data['base_ms']} (nominal {data['summary']['nominal_per_worker_jobs_per_s']:.0f} "
        f"jobs/s each), {data['gateway_workers']} gateway process(es); submit-only capacity "
        f"[bold]{cap['throughput_per_s']:.0f}[/] POST/s (CPU cores {_cores(cap['cpu_cores'])})"
    )
    t = Table(title="Horizontal scaling through the gateway", box=box.SIMPLE_HEAD)
    for name in (
        "workers",
        "jobs/s",
        "x linear",
        "x nominal",
        "e2e p50",
        "e2e p99",
        "70% rate",
        "70% p99",
        "p99/svc",
        "CPU cores (sat.)",
        "others",
    ):
        t.add_column(name, justify="right")
    rows = {r["workers"]: r for r in data["summary"]["rows"]}
    for c in data["cases"]:
        r, sat, l70 = rows[c["workers"]], c["saturation"], c["load70"]
        t.add_row(
            str(c["workers"]),
            _n(sat["throughput_per_s"]),
            _n(r["vs_linear_measured"], 2),
            _n(r["vs_linear_nominal"], 2),
            _n(sat["e2e_p50_ms"]),
            _n(sat["e2e_p99_ms"]),
            _n(l70["rate_per_s"]),
            _n(l70["e2e_p99_ms"]),
            _n(r["load70_p99_over_service"], 2),
            _cores(sat["cpu_cores"]),
            _n(sat["others_cores"], 2),
        )
    console.print(t)
    s = data["summary"]
    console.print(
        f"target >= {s['linear_target']:.0%} of linear at the largest count: "
        f"{s['linear_met_at_max']}; 70%-load p99 < {s['p99_target_x_service']}x service: "
        f"{s['p99_met']}  (cores: ga=gateway wo=workers re=redis lo=load generator)"
    )


def print_mixed(data: dict[str, Any], console: Console) -> None:
    p, cap = data["params"], data["capacity_jobs_per_s"]
    console.print(
        f"[bold]Benchmark 2[/]: {p['workers']} synthetic workers, max_batch {p['max_batch']}, "
        f"batch ms = {p['base_ms']} + {p['per_token_ms']} x padded words; inputs "
        f"{p['short_words']} words (90%) and {10 * p['short_words']} (10%); overlap "
        f"{p['overlap']}; measured capacity: buckets {cap['mix_buckets']:.1f} jobs/s, "
        f"one bucket {cap['mix_one']:.1f} jobs/s; utilisation of: {p['util_of']}; "
        f"short-only workers (buckets): {p.get('pin_short', 0)}"
    )
    t = Table(title="Short-job latency: size buckets vs one bucket", box=box.SIMPLE_HEAD)
    for name in (
        "util",
        "config",
        "rate",
        "jobs/s",
        "short p50",
        "short p99",
        "short wait p99",
        "long p50",
        "long p99",
        "errors",
    ):
        t.add_column(name, justify="right")
    for c in data["cases"]:
        sh, lo = c["short"], c["long"]
        t.add_row(
            f"{c['utilisation']:.0%}",
            c["model"],
            _n(c["rate_per_s"]),
            _n(c["throughput_per_s"]),
            _n(sh["e2e_ms"]["p50"]),
            _n(sh["e2e_ms"]["p99"]),
            _n(sh["queue_wait_ms"]["p99"]),
            _n(lo["e2e_ms"]["p50"]),
            _n(lo["e2e_ms"]["p99"]),
            str(sum(c["errors"].values())),
        )
    console.print(t)
    for r in data["summary"]["rows"]:
        console.print(
            f"at {r['utilisation']:.0%}: short-job p99 one bucket / buckets = "
            f"[bold]{_n(r['ratio'], 2)}x[/] ({_n(r['short_p99_one_ms'])} / "
            f"{_n(r['short_p99_buckets_ms'])} ms)"
        )
    s = data["summary"]
    console.print(f"target >= {s['target_ratio_at_90']}x at 90%: {s['met_at_90']}")
