"""A soak's result as Markdown tables (for docs/benchmarks/soak.md)."""

from __future__ import annotations

from typing import Any

from sluicebench.loadgen.soak_report import _errs, _f

ROWS = 21


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _spaced(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(samples) <= ROWS:
        return samples
    step = (len(samples) - 1) / (ROWS - 1)
    return [samples[round(i * step)] for i in range(ROWS)]


def samples_table(out: dict[str, Any]) -> str:
    every = out["params"]["sample_s"]
    rows = []
    for s in _spaced(out["samples"]):
        w, rss, fam = s["window"], s["rss_mb"], s["families"]
        workers = [v for k, v in rss.items() if k.startswith("worker")]
        rows.append(
            [
                _f(s["t_s"], ".0f"),
                _f(w.get("done", 0) / every),
                _errs(w.get("errors")),
                _f(w.get("e2e_p50_ms")),
                _f(w.get("e2e_p99_ms")),
                _f(rss.get("gateway"), ".2f"),
                _f(max(workers) if workers else None, ".2f"),
                _f(s["redis_used_mb"], ".2f"),
                str(s["redis_keys"]),
                str(fam["job"]),
                str(fam["idempotency"]),
                str(fam["wait_hist"] + fam.get("e2e_hist", 0)),
                str(s.get("metric_series")),
            ]
        )
    head = [
        "t s",
        "jobs/s",
        "errors",
        "p50 ms",
        "p99 ms",
        "gateway MB",
        "worker MB (max)",
        "Redis used MB",
        "keys",
        "job hashes",
        "idem keys",
        "histograms",
        "series",
    ]
    return _table(head, rows)


def rss_table(out: dict[str, Any]) -> str:
    rows = []
    for name, g in out["verdict"]["rss"].items():
        rows.append(
            [
                name,
                _f(g["start_mb"], ".2f"),
                _f(g["end_mb"], ".2f"),
                _f(g["growth_mb"], "+.2f"),
                _f(g["growth_pct"], "+.2f") + "%",
                _f(g["bytes_per_job"], ".0f"),
                _f(g.get("bytes_per_job_trend"), ".0f"),
                _f(g["peak_mb"], ".2f"),
            ]
        )
    head = [
        "process",
        "start MB",
        "end MB",
        "growth",
        "growth %",
        "B/job",
        "B/job trend",
        "peak MB",
    ]
    return _table(head, rows)


def checks_table(out: dict[str, Any]) -> str:
    rows = [
        [c["name"], "pass" if c["ok"] else "**FAIL**", c["detail"]]
        for c in out["verdict"]["checks"]
    ]
    return _table(["check", "result", "figures"], rows)


def markdown(out: dict[str, Any]) -> str:
    return (
        "\n\n".join(
            [
                "### Samples",
                samples_table(out),
                "### RSS",
                rss_table(out),
                "### Verdict",
                checks_table(out),
            ]
        )
        + "\n"
    )
