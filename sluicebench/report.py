"""The queue-hop benchmark's targets and its rich table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from sluicebench.queue_hop import HopResult
    from sluicebench.rq_baseline import RqResult

# Targets from issue 2 / DESIGN.md, checked in the benchmark, never in a timed test.
TARGET_BATCH, TARGET_WORKERS, TARGET_VS_RQ = 32, 1, 50.0
TARGET_ROUND_TRIPS_PER_BATCH = 3.0


def summary(cases: list[HopResult], rq: RqResult | None) -> dict[str, Any]:
    """Whether the targets hold in this run (None where a case was not run)."""
    ref = next((c for c in cases if (c.batch, c.workers) == (TARGET_BATCH, TARGET_WORKERS)), None)
    ratio = ref.drain_jobs_per_s / rq.worker_jobs_per_s if ref and rq else None
    worst_rt = max((c.round_trips_per_batch for c in cases), default=None)
    return {
        "batch32_1worker_drain_vs_rq_worker": round(ratio, 1) if ratio is not None else None,
        "vs_rq_target": TARGET_VS_RQ,
        "vs_rq_met": ratio >= TARGET_VS_RQ if ratio is not None else None,
        "max_worker_round_trips_per_batch": round(worst_rt, 3) if worst_rt is not None else None,
        "round_trips_target": TARGET_ROUND_TRIPS_PER_BATCH,
        "round_trips_met": worst_rt <= TARGET_ROUND_TRIPS_PER_BATCH
        if worst_rt is not None
        else None,
    }


def _num(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _table(data: dict[str, Any]) -> Table:
    t = Table(title="Queue hop: submit + claim + complete, no-op handler", box=box.SIMPLE_HEAD)
    for name in (
        "",
        "batch",
        "workers",
        "jobs",
        "submit/s",
        "drain/s",
        "hop/s",
        "drain xRQ",
        "RT/batch",
        "cmds/job",
    ):
        t.add_column(name, justify="left" if not name else "right")
    rq = data["rq"]
    if rq:
        t.add_row(
            "RQ",
            "1",
            "1",
            _num(rq["jobs"]),
            _num(rq["enqueue_jobs_per_s"]),
            _num(rq["worker_jobs_per_s"]),
            _num(rq["hop_jobs_per_s"]),
            "1.0",
            f"{rq['worker_round_trips_per_job']:.1f}/job",
            _num(rq["commands_per_job"], 1),
        )
    for c in data["cases"]:
        t.add_row(
            "sluice",
            str(c["batch"]),
            str(c["workers"]),
            _num(c["jobs"]),
            _num(c["submit_jobs_per_s"]),
            _num(c["drain_jobs_per_s"]),
            _num(c["hop_jobs_per_s"]),
            _num(c.get("drain_vs_rq_worker"), 1),
            f"{c['worker_round_trips_per_batch']:.2f}",
            _num(c["commands_per_job"], 1),
        )
    return t


def render(data: dict[str, Any], console: Console | None = None) -> None:
    # Wide enough for the table when piped (rich assumes 80 columns off a terminal).
    console = console or Console(width=max(Console().width, 110))
    console.print(_table(data))
    s = data["summary"]
    console.print(
        f"target batch {TARGET_BATCH}, {TARGET_WORKERS} worker >= {TARGET_VS_RQ:g}x RQ: "
        f"{_num(s['batch32_1worker_drain_vs_rq_worker'], 1)}x (met: {s['vs_rq_met']}); "
        f"worker round trips per batch <= {TARGET_ROUND_TRIPS_PER_BATCH:g}: "
        f"max {_num(s['max_worker_round_trips_per_batch'], 2)} (met: {s['round_trips_met']})"
    )
    console.print(
        "drain = claim + complete by the workers; hop = jobs / (submit time + drain time); "
        "RT = round trips counted in the client (RQ: per job); cmds = INFO commandstats calls, "
        "including commands run inside scripts, submit + worker side."
    )
