"""Print a load run's summary as rich tables."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table


def console() -> Console:
    """A terminal's own width; piped to a file or a CI log, wide enough that the tables
    are not squeezed."""
    return Console() if sys.stdout.isatty() else Console(width=150)


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}"


def _row(name: str, lat: dict[str, Any]) -> list[str]:
    e, w, r = lat["e2e_ms"], lat["queue_wait_ms"], lat["run_ms"]
    return [
        name,
        str(lat["jobs"]),
        _ms(e["p50"]),
        _ms(e["p95"]),
        _ms(e["p99"]),
        _ms(w["p50"]),
        _ms(w["p99"]),
        _ms(r["p50"]),
    ]


def print_summary(out: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    spec = out["spec"]
    offered = f"rate {spec['rate']}/s" if spec["rate"] else f"concurrency {spec['concurrency']}"
    if spec["mode"] == "trace":
        offered = f"trace of {spec['trace_jobs']} jobs"
    console.print(
        f"[bold]{spec['model']}[/] at {spec['url']}: {spec['mode']} loop, {offered}; "
        f"sent {out['sent']}, succeeded {out['succeeded']} in {out['elapsed_s']:.1f}s"
    )
    console.print(
        f"throughput [bold]{out['throughput_per_s']:.1f} jobs/s[/] "
        f"(offered {out['offered_per_s']:.1f}/s over a {out['window_s']:.1f}s window); "
        f"submit p50 {_ms(out['submit_ms']['p50'])} ms p99 {_ms(out['submit_ms']['p99'])} ms; "
        f"send lag p99 {_ms(out['send_lag_ms']['p99'])} ms; client CPU {out['client_cpu_s']:.1f}s"
    )
    table = Table(
        "bucket",
        "jobs",
        "e2e p50",
        "e2e p95",
        "e2e p99",
        "wait p50",
        "wait p99",
        "run p50",
        title="latency (ms): end to end, queue wait, run",
    )
    for name, lat in out["buckets"].items():
        table.add_row(*_row(name, lat))
    table.add_row(*_row("all", out), style="bold")
    console.print(table)
    errors = out["errors"]
    console.print(
        "errors: " + (", ".join(f"{k} x{v}" for k, v in errors.items()) if errors else "none")
    )
