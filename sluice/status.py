"""``sluice status``: queues, workers and jobs as rich tables."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from sluice.config import SluiceConfig
from sluice.jobs import JobRecord
from sluice.queue import QueueClient
from sluice.queue.pause import PauseState, state_call
from sluice.records import JOB_COUNTS
from sluice.registry import list_workers_call

STATUS_COUNTERS = JOB_COUNTS


def pause_label(state: PauseState) -> str:
    """A model's state as ``sluice status`` shows it (docs/adr/0154)."""
    if not state.paused:
        return "running"
    return "PAUSED, refusing" if state.refuse_submits else "PAUSED"


def queues_table(q: QueueClient, cfg: SluiceConfig) -> Table:
    table = Table(title="Queues", title_justify="left")
    cols = ("model", "state", "bucket", "queued", "cost", "in flight", "dead", *STATUS_COUNTERS)
    for col in cols:
        table.add_column(col, justify="left" if col in ("model", "state", "bucket") else "right")
    for name in cfg.models:
        stats = q.stats(name)
        state = pause_label(q.run(state_call(name)))
        for i, b in enumerate(stats.buckets):
            first = i == 0
            table.add_row(
                name if first else "",
                state if first else "",
                b.bucket,
                str(b.queued),
                str(b.queued_cost),
                str(stats.in_flight) if first else "",
                str(stats.dead_lettered) if first else "",
                *((str(stats.counters.get(c, 0)) if first else "") for c in STATUS_COUNTERS),
            )
    return table


def workers_table(q: QueueClient, cfg: SluiceConfig) -> Table:
    table = Table(title="Workers", title_justify="left")
    cols = ("model", "worker", "state", "device", "buckets", "jobs", "cost/s", "busy", "start s")
    for col in cols:
        table.add_column(col)
    for name in cfg.models:
        live, _stale = q.run(list_workers_call(name))
        for w in live:
            table.add_row(
                name,
                w.id,
                w.state,
                w.device,
                ",".join(w.buckets),
                str(w.jobs),
                f"{w.service_rate:.0f}",
                "yes" if w.busy else "no",
                f"{sum((w.extra.get('start_path') or {}).values()):.1f}",
            )
    return table


def bulk_table(q: QueueClient, cfg: SluiceConfig) -> Table | None:
    """Unfinished bulk jobs (None when there are none)."""
    from sluice.bulk.ops import BulkOps, scripts
    from sluice.errors import JobNotFound

    ops = BulkOps(list(cfg.models), cfg.bulk.ttl_s)
    q.register(scripts())
    rows = []
    for name in cfg.models:
        for bulk_id in q.run(ops.active(name, limit=50)):
            try:
                b = q.run(ops.get(bulk_id))
            except JobNotFound:
                continue
            rows.append(
                (
                    name,
                    b.id,
                    b.state,
                    f"{b.done}/{b.total}",
                    str(b.failed),
                    f"{b.rate_per_s:.1f}",
                    str(b.slices),
                )
            )
    if not rows:
        return None
    table = Table(title="Bulk jobs", title_justify="left")
    for col in ("model", "bulk job", "state", "done", "failed", "lines/s", "slices"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    return table


def webhooks_table(q: QueueClient, cfg: SluiceConfig) -> Table | None:
    """Webhook deliveries per model: pending, due, the oldest due's wait, given up
    (None when no model has any)."""
    import time

    from sluice.webhooks.ops import WebhookOps

    ops = WebhookOps(list(cfg.models))
    now_ms = int(time.time() * 1000)
    rows = [q.run(ops.backlog(name, now_ms)) for name in cfg.models]
    if not any(b.pending or b.dead for b in rows):
        return None
    table = Table(title="Webhooks", title_justify="left")
    for col in ("model", "pending", "due", "oldest due s", "given up"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for b in rows:
        table.add_row(b.model, str(b.pending), str(b.due), f"{b.oldest_due_s:.1f}", str(b.dead))
    dead = [(b.model, i) for b in rows if b.dead for i in q.run(ops.dead(b.model, 5))]
    if dead:
        table.caption = (
            "given up, newest: "
            + ", ".join(i for _, i in dead)
            + ("  (POST /v1/admin/webhooks/{id}/redeliver sends one again)")
        )
    return table


def job_table(rec: JobRecord) -> Table:
    table = Table(title=f"Job {rec.id}", title_justify="left", show_header=False)
    table.add_column("field")
    table.add_column("value")
    rows = {
        "model": rec.model,
        "status": rec.status.value,
        "bucket": rec.bucket,
        "cost": str(rec.cost),
        "priority": rec.priority,
        "attempts": str(rec.attempts),
        "queue wait ms": str(rec.timings.get("queue_wait_ms")),
        "run ms": str(rec.run_ms),
        "error": json.dumps(rec.error) if rec.error else "",
        "result": json.dumps(rec.result)[:200] if rec.result is not None else "",
    }
    if rec.webhook is not None:
        w = rec.webhook
        rows["webhook"] = f"{w['state']} ({w.get('attempts', 0)} attempts"
        rows["webhook"] += f", last {w['last_status']})" if w.get("last_status") else ")"
    for k, v in rows.items():
        table.add_row(k, v)
    return table


def print_status(q: QueueClient, cfg: SluiceConfig, job_id: str | None) -> None:
    # Piped output is read by scripts and tests: keep every column whole.
    console = Console(width=None if sys.stdout.isatty() else 200)
    if job_id:
        console.print(job_table(q.get(job_id)))
        return
    console.print(queues_table(q, cfg))
    console.print(workers_table(q, cfg))
    for extra in (bulk_table(q, cfg), webhooks_table(q, cfg)):
        if extra is not None:
            console.print(extra)
