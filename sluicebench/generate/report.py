"""The generate benchmark's table and its targets, PASS or MISS (a report, never an
assertion)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

COLUMNS = (
    "system",
    "loop",
    "tokens/s",
    "tok/CPU-s",
    "TTFT p50/p99 ms",
    "ITL p50/p99 ms",
    "req (err, short)",
    "CPU s by process",
    "x(b)",
    "x(c)",
    "x(e)",
)

LEFT = ("system", "loop", "CPU s by process")


def _num(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _pair(a: float | None, b: float | None) -> str:
    return f"{_num(a, 1)} / {_num(b, 1)}"


def _cpu(roles: dict[str, dict[str, float]]) -> str:
    """Busiest first: ``worker 41.2, gateway 9.8, ray other x6 3.1``."""
    out = []
    for role, r in sorted(roles.items(), key=lambda kv: -kv[1]["cpu_s"]):
        if r["cpu_s"] >= 0.05:
            procs = int(r["procs"])
            out.append(f"{role}{'' if procs == 1 else f' x{procs}'} {r['cpu_s']:.1f}")
    return ", ".join(out)


def _ratio(s: dict[str, Any], other: dict[str, Any] | None) -> str:
    if not other or other.get("skipped") or "closed" not in other:
        return "-"
    a, b = s["closed"]["tokens_per_s"], other["closed"]["tokens_per_s"]
    return f"{a / b:.2f}" if a is not None and b else "-"


def table(data: dict[str, Any]) -> Table:
    p = data["params"]
    title = (
        f"sluice bench generate: {p['model']}, {p['slots']} slots, "
        f"closed {p['concurrency']} clients {p['duration_s']:g} s, "
        f"open {data['open_rate_rps']} req/s for {p['open_s']:g} s"
    )
    t = Table(title=title, box=box.SIMPLE_HEAD)
    for col in COLUMNS:
        t.add_column(col, justify="left" if col in LEFT else "right")
    systems = data["systems"]
    for name, s in systems.items():
        label = f"({name}) {s['label']}"
        if s.get("skipped"):
            t.add_row(label, "skipped", s["skipped"], *[""] * (len(COLUMNS) - 3))
            continue
        for loop in ("closed", "open"):
            ph = s.get(loop)
            if ph is None:
                continue
            ratios = [_ratio(s, systems.get(o)) if loop == "closed" else "" for o in "bce"]
            t.add_row(
                label if loop == "closed" else "",
                loop,
                _num(ph["tokens_per_s"]),
                _num(ph.get("tokens_per_cpu_s")),
                _pair(ph["ttft_p50_ms"], ph["ttft_p99_ms"]),
                _pair(ph["itl_p50_ms"], ph["itl_p99_ms"]),
                f"{ph['requests']} ({ph['errors']}, {ph['short']})",
                _cpu(ph["cpu"]),
                *ratios,
            )
    return t


def render(data: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console(width=170)
    console.print(table(data))
    for t in data["targets"]:
        value = "-" if t["value"] is None else f"{t['value']:g}"
        note = f" ({t['note']})" if t["note"] else ""
        console.print(f"{t['verdict']:>4}  {t['target']}: {value}{note}")
    for name, s in data["systems"].items():
        if not s.get("skipped"):
            console.print(f"({name}) cores: {s['cores']}")
    console.print(
        "tokens/s: output tokens that arrived in the window (closed: after the warm-up, "
        "until the clients stop; open: all, first arrival to last token); TTFT from send "
        "(open loop: from the due time); ITL: gaps between chunks spread over their "
        "tokens; short: requests that ended before max_tokens; tok/CPU-s: output tokens "
        "over the CPU seconds of all the system's processes in the loop."
    )
