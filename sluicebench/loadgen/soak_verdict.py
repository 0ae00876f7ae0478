"""A soak's pass/fail criteria, computed from its samples (pure).

Memory growth is measured from the end of the warm-up to the end of the load:
the median of the first ``EDGE`` samples taken at or after the warm-up, against
the median of the last ``EDGE`` samples taken while the load ran. Medians of a
few samples, not single readings, so one allocator hiccup neither hides nor
fakes a trend. The per-job leak bound is a robust slope of RSS against jobs
completed, fitted over every sample of the run (ADR 0073). Redis keys and
memory must plateau once every TTL the soak config sets has had time to act
once (``plateau_from_s``): the mean of the last quarter of the remaining
samples against the mean of the first quarter.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

EDGE = 3  # samples per median at each end
MB = 1024 * 1024
EXPIRY_SLACK_S = 5.0  # Redis's active expiry is not instant; a TTL ends within this
WAIT_HIST_TTL_S = 3600  # claim.lua and complete.lua: EXPIRE on each 10 s window
WAIT_HIST_WINDOW_S = 10
DEAD_LETTER_CAP = 10_000  # _common.lua: LTRIM of the dead-letter list
WAKE_CAP = 64


@dataclass(frozen=True)
class Limits:
    """The soak's parameters that the criteria depend on."""

    warmup_s: float
    duration_s: float
    rate_per_s: float
    result_ttl_s: float
    idempotency_ttl_s: float
    idempotency_fraction: float
    models: int = 1
    buckets: int = 1
    max_rss_growth_pct: float = 10.0
    # 10% of a 60 MB process is more than a short run can leak: a second bound per
    # job handled, on the trend over the whole run (see rss_growth).
    # Measured over the whole run without a leak: 50-200 B/job, 595 once when a
    # latency burst raised the gateway's high-water mark (a step the trend leaves
    # out); with a 1 KB/job leak injected, 1,200-1,300 B/job.
    max_bytes_per_job: float = 600.0
    plateau_tolerance: float = 0.2  # late mean <= (1 + this) x early mean (+ slack)

    @property
    def plateau_from_s(self) -> float:
        return self.warmup_s + max(self.result_ttl_s, self.idempotency_ttl_s) + EXPIRY_SLACK_S


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _jobs_between(samples: Sequence[dict[str, Any]], t0: float, t1: float) -> int:
    """Jobs that ended between two sample times (each sample counts its own window)."""
    return sum(s["window"].get("done", 0) for s in samples if t0 < s["t_s"] <= t1)


Series = list[tuple[float, float]]  # (t_s, MB)


def _at(series: Series, i: int) -> tuple[float, float]:
    """The median of EDGE samples centred on index i (clamped), with its middle time."""
    lo = min(max(0, i - EDGE // 2), len(series) - EDGE)
    window = series[lo : lo + EDGE]
    return window[EDGE // 2][0], statistics.median(v for _, v in window)


def _per_job(
    during: Sequence[dict[str, Any]], a: tuple[float, float], b: tuple[float, float], share: int
) -> float | None:
    jobs = _jobs_between(during, a[0], b[0]) / share
    return round((b[1] - a[1]) * MB / jobs, 1) if jobs else None


def theil_sen_slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The median of the slopes between every two points: a fit over the whole
    series that one odd reading cannot move (None with fewer than two x values)."""
    slopes = [
        (ys[j] - ys[i]) / (xs[j] - xs[i])
        for i in range(len(xs))
        for j in range(i + 1, len(xs))
        if xs[j] != xs[i]
    ]
    return statistics.median(slopes) if slopes else None


def without_largest_step(ys: Sequence[float]) -> list[float]:
    """The series with its largest rise between two readings cut to the median rise.

    RSS is a high-water mark: one burst of concurrent requests raises it once and
    for good. That one step is not a trend; a leak is a rise in every interval,
    which this leaves (all but one interval of) in place.
    """
    steps = [b - a for a, b in zip(ys, ys[1:], strict=False)]
    if not steps:
        return list(ys)
    k = max(range(len(steps)), key=steps.__getitem__)
    cut = max(0.0, steps[k] - statistics.median(steps))
    return [y if i <= k else y - cut for i, y in enumerate(ys)]


def _trend_per_job(series: Series, during: Sequence[dict[str, Any]], share: int) -> float | None:
    """Bytes per job: the robust slope of RSS against the jobs done since the first sample."""
    t0 = series[0][0]
    jobs = [_jobs_between(during, t0, t) / share for t, _ in series]
    slope_mb = theil_sen_slope(jobs, without_largest_step([v for _, v in series]))
    return None if slope_mb is None else round(slope_mb * MB, 1)


def _growth(series: Series, during: Sequence[dict[str, Any]], share: int) -> dict[str, Any]:
    start, end = _at(series, 0), _at(series, len(series))
    return {
        "start_mb": start[1],
        "end_mb": end[1],
        "growth_mb": round(end[1] - start[1], 2),
        "growth_pct": round(100.0 * (end[1] - start[1]) / start[1], 2),
        "bytes_per_job": _per_job(during, start, end, share),
        "bytes_per_job_trend": _trend_per_job(series, during, share),
        "peak_mb": max(v for _, v in series),
        "samples": len(series),
    }


def rss_growth(samples: Sequence[dict[str, Any]], lim: Limits) -> dict[str, dict[str, Any]]:
    """Per process: RSS at the end of the warm-up and of the load, growth in % and per job.

    Per job divides the growth by the jobs that process handled in between: all
    of them for the gateway, an equal share for each worker (they pull alike).
    The trend is a Theil-Sen slope of RSS against jobs done, over every sample
    after the warm-up, with the largest single step left out: a leak that starts
    mid-run still tilts it, while a burst of concurrent requests raises RSS once
    (a high-water mark the allocator keeps) and is that one step.
    """
    during = [s for s in samples if s["t_s"] <= lim.duration_s + 1e-6]
    after_warmup = [s for s in during if s["t_s"] >= lim.warmup_s]
    names = sorted({n for s in during for n in s["rss_mb"]})
    workers = sum(1 for n in names if n.startswith("worker"))
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        series = [(s["t_s"], s["rss_mb"][name]) for s in after_warmup if name in s["rss_mb"]]
        if len(series) < 3 * EDGE:
            out[name] = {
                "start_mb": None,
                "end_mb": None,
                "growth_pct": None,
                "growth_mb": None,
                "bytes_per_job": None,
                "bytes_per_job_trend": None,
                "samples": len(series),
                "peak_mb": max((v for _, v in series), default=None),
            }
            continue
        share = workers if name.startswith("worker") else 1
        out[name] = _growth(series, during, share)
    return out


def _plateau(samples: Sequence[dict[str, Any]], lim: Limits, value: Any) -> dict[str, Any]:
    span = [s for s in samples if lim.plateau_from_s <= s["t_s"] <= lim.duration_s + 1e-6]
    if len(span) < 4:
        return {"early": None, "late": None, "samples": len(span)}
    q = max(1, len(span) // 4)
    early = statistics.fmean(value(s) for s in span[:q])
    late = statistics.fmean(value(s) for s in span[-q:])
    return {"early": round(early, 3), "late": round(late, 3), "samples": len(span)}


def _ttl_keys(s: dict[str, Any]) -> float:
    """Keys that must plateau: all but the latency histograms, which build up for an hour."""
    fam = s["families"]
    return float(s["redis_keys"] - fam.get("wait_hist", 0) - fam.get("e2e_hist", 0))


def plateaus(samples: Sequence[dict[str, Any]], lim: Limits) -> dict[str, dict[str, Any]]:
    return {
        "keys": _plateau(samples, lim, _ttl_keys),
        "job_hashes": _plateau(samples, lim, lambda s: s["families"]["job"]),
        "redis_used_mb": _plateau(samples, lim, lambda s: s["redis_used_mb"]),
    }


def _plateau_check(name: str, p: dict[str, Any], tol: float, slack: float) -> Check:
    if p["early"] is None:
        return Check(name, False, f"too few samples after the plateau start ({p['samples']})")
    ok = p["late"] <= (1 + tol) * p["early"] + slack
    return Check(name, ok, f"late {p['late']:g} vs early {p['early']:g} (limit x{1 + tol:g})")


def family_bounds(lim: Limits) -> dict[str, float]:
    """The most keys of each bounded family a healthy run can hold at once."""
    per_s = lim.rate_per_s * 1.5  # Poisson bursts and expiry lag
    return {
        "job": per_s * (lim.result_ttl_s + EXPIRY_SLACK_S) + 200,
        "idempotency": per_s * lim.idempotency_fraction * (lim.idempotency_ttl_s + EXPIRY_SLACK_S)
        + 50,
        "wait_hist": lim.models * (WAIT_HIST_TTL_S / WAIT_HIST_WINDOW_S + 1),
        "e2e_hist": lim.models * (WAIT_HIST_TTL_S / WAIT_HIST_WINDOW_S + 1),
        "wake": lim.models * lim.buckets,
        "queue": lim.models * lim.buckets,
    }


def _bounds_checks(samples: Sequence[dict[str, Any]], lim: Limits) -> list[Check]:
    late = [s for s in samples if s["t_s"] >= lim.plateau_from_s] or list(samples)
    out = []
    for family, bound in family_bounds(lim).items():
        peak = max((s["families"].get(family, 0) for s in late), default=0)
        out.append(Check(f"{family} keys bounded", peak <= bound, f"peak {peak} <= {bound:.0f}"))
    dead = max((s["dead_letters"] for s in samples), default=0)
    cap = lim.models * DEAD_LETTER_CAP
    out.append(Check("dead letters bounded", dead <= cap, f"peak {dead} <= {cap}"))
    return out


def _rss_checks(growth: dict[str, dict[str, Any]], lim: Limits) -> list[Check]:
    out = []
    for name, g in growth.items():
        if name == "redis":
            continue  # Redis is judged by its dataset, below, not by its RSS
        pct, per_job = g["growth_pct"], g["bytes_per_job_trend"]
        ok = pct is not None and pct < lim.max_rss_growth_pct
        shown = "n/a" if pct is None else f"{pct:+.1f}%"
        out.append(
            Check(f"{name} RSS growth", ok, f"{g['start_mb']} -> {g['end_mb']} MB ({shown})")
        )
        ok = per_job is not None and per_job < lim.max_bytes_per_job
        out.append(
            Check(
                f"{name} RSS growth per job (trend)",
                ok,
                f"{per_job} B/job, the slope over the run; {g['bytes_per_job']} "
                f"end to end (limit {lim.max_bytes_per_job:g})",
            )
        )
    return out


def _series_check(samples: Sequence[dict[str, Any]], lim: Limits) -> Check:
    series = [
        s["metric_series"]
        for s in samples
        if s["t_s"] >= lim.warmup_s and s.get("metric_series") is not None
    ]
    if len(series) < 2:
        return Check("metric label sets bounded", False, "no /metrics readings")
    grew = series[-1] - series[0]
    return Check(
        "metric label sets bounded", grew <= 0, f"{series[0]} -> {series[-1]} sluice_* series"
    )


def fd_check(first: dict[str, Any], last: dict[str, Any], slack: int = 64) -> Check:
    """Once the load has stopped, no process holds many more files or sockets than it
    did when the load started: a connection leaked per request would hold thousands.
    The slack is for the gateway's Redis pool, which keeps the connections a burst
    opened (up to redis_max_connections): +12 after one latency burst, measured."""
    grew = {
        n: last["fds"][n] - v for n, v in first["fds"].items() if n != "redis" and n in last["fds"]
    }
    worst = max(grew.values(), default=0)
    shown = ", ".join(f"{n} {first['fds'][n]}->{last['fds'][n]}" for n in grew)
    return Check("no file descriptors left open", bool(grew) and worst <= slack, shown)


def completion_checks(load: dict[str, Any], final: dict[str, Any]) -> list[Check]:
    """No errors, every accepted job done, nothing left queued, held or waited on."""
    errors = load.get("errors") or {}
    counters = final.get("counters", {})
    arrived, done = counters.get("arrived", 0), counters.get("succeeded", 0)
    left = final.get("queued", 0) + final.get("in_flight", 0)
    return [
        Check("no errors", not errors, ", ".join(f"{k} x{v}" for k, v in errors.items()) or "none"),
        Check(
            "every accepted job succeeded",
            load["succeeded"] == load["sent"] and done == arrived,
            f"load generator {load['succeeded']}/{load['sent']}; Redis {done}/{arrived}",
        ),
        Check("queues empty after the run", left == 0, f"queued + in flight = {left}"),
        Check(
            "no long-poll waiter left",
            final.get("waiters") in (0, 0.0),
            f"waiters gauge {final.get('waiters')}",
        ),
        Check(
            "results and idempotency keys expired after the run",
            final.get("job_keys") == 0 and final.get("idempotency_keys") == 0,
            f"job hashes {final.get('job_keys')}, idempotency keys "
            f"{final.get('idempotency_keys')} after the TTLs",
        ),
    ]


def verdict(
    samples: Sequence[dict[str, Any]], lim: Limits, load: dict[str, Any], final: dict[str, Any]
) -> dict[str, Any]:
    """Every criterion with its figures, and whether all passed."""
    growth = rss_growth(samples, lim)
    plat = plateaus(samples, lim)
    checks = [
        *completion_checks(load, final),
        *_rss_checks(growth, lim),
        _plateau_check("Redis keys plateau", plat["keys"], lim.plateau_tolerance, 50),
        # Tighter than the keys: a 60 s run without result TTLs grew it only 30%.
        _plateau_check("Redis used_memory plateau", plat["redis_used_mb"], 0.1, 0.25),
        *_bounds_checks(samples, lim),
        _series_check(samples, lim),
        fd_check(samples[0], final.get("sample", samples[-1])),
    ]
    return {
        "passed": all(c.ok for c in checks),
        "checks": [asdict(c) for c in checks],
        "rss": growth,
        "plateaus": plat,
        "family_bounds": family_bounds(lim),
        "plateau_from_s": lim.plateau_from_s,
    }
