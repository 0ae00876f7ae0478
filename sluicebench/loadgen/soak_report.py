"""Print a soak's result: samples over time, RSS per process, and the verdict."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

MAX_ROWS = 24


def _f(v: Any, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def _errs(errors: Any) -> str:
    """A window's errors by cause ("503 x2"), or 0."""
    if not errors:
        return "0"
    return " ".join(f"{k} x{v}" for k, v in errors.items())


def _rows(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most MAX_ROWS evenly spaced samples, always the first and the last."""
    if len(samples) <= MAX_ROWS:
        return samples
    step = (len(samples) - 1) / (MAX_ROWS - 1)
    return [samples[round(i * step)] for i in range(MAX_ROWS)]


def _sample_table(samples: list[dict[str, Any]], every_s: float) -> Table:
    t = Table(
        "t s",
        "jobs/s",
        "err",
        "p50 ms",
        "p99 ms",
        "gw MB",
        "wk MB",
        "redis MB",
        "keys",
        "job",
        "idem",
        "waith",
        "dead",
        "series",
        title="samples (load of the window before each sample; wk = largest worker)",
    )
    for s in _rows(samples):
        w, rss, fam = s["window"], s["rss_mb"], s["families"]
        workers = [v for k, v in rss.items() if k.startswith("worker")]
        t.add_row(
            _f(s["t_s"], ".0f"),
            _f(w.get("done", 0) / every_s if w else None),
            _errs(w.get("errors")),
            _f(w.get("e2e_p50_ms")),
            _f(w.get("e2e_p99_ms")),
            _f(rss.get("gateway")),
            _f(max(workers) if workers else None),
            _f(s["redis_used_mb"], ".2f"),
            str(s["redis_keys"]),
            str(fam["job"]),
            str(fam["idempotency"]),
            str(fam["wait_hist"]),
            str(s["dead_letters"]),
            str(s.get("metric_series") or "-"),
        )
    return t


def _rss_table(rss: dict[str, dict[str, Any]]) -> Table:
    t = Table(
        "process",
        "start MB",
        "end MB",
        "growth MB",
        "growth %",
        "B/job",
        "B/job trend",
        "peak MB",
        title="RSS from the end of the warm-up to the end of the load (medians of 3)",
    )
    for name, g in rss.items():
        t.add_row(
            name,
            _f(g["start_mb"], ".2f"),
            _f(g["end_mb"], ".2f"),
            _f(g["growth_mb"], "+.2f"),
            _f(g["growth_pct"], "+.2f"),
            _f(g["bytes_per_job"], ".0f"),
            _f(g.get("bytes_per_job_trend"), ".0f"),
            _f(g["peak_mb"], ".2f"),
        )
    return t


def print_soak(out: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    p, cap, load = out["params"], out["capacity"], out["load"]
    console.print(
        f"soak: {p['workers']} synthetic workers (base {p['base_ms']} ms, batch "
        f"{p['max_batch']}); capacity nominal {cap['nominal_per_s']:.1f}/s, measured "
        f"{cap['measured_per_s']:.1f}/s; load {out['rate_per_s']}/s "
        f"({p['load_fraction']:.0%}) for {p['duration_s']:.0f} s, warm-up {p['warmup_s']:.0f} s; "
        f"result TTL {p['result_ttl_s']} s"
    )
    e2e = load["e2e_ms"]
    console.print(
        f"sent {load['sent']}, succeeded {load['succeeded']}; e2e p50 {_f(e2e['p50'])} ms, "
        f"p99 {_f(e2e['p99'])} ms, max {_f(e2e['max'])} ms (after the warm-up)"
    )
    console.print(_sample_table(out["samples"], p["sample_s"]))
    v = out["verdict"]
    console.print(_rss_table(v["rss"]))
    checks = Table("check", "result", "figures", title="verdict")
    for c in v["checks"]:
        checks.add_row(c["name"], "[green]pass[/]" if c["ok"] else "[red]FAIL[/]", c["detail"])
    console.print(checks)
    console.print("[bold green]PASSED[/]" if v["passed"] else "[bold red]FAILED[/]")
