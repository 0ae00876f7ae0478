"""What a loop measured, summarized; the issue's targets checked (pure).

- tokens/s: output tokens that arrived inside the loop's window, over the window
  (a closed loop's window leaves its warm-up and its drain out; an open loop's
  runs from the first arrival to the last token);
- TTFT: sent (an open loop: due) to the first chunk with a token;
- inter-token: each gap between a request's chunks, spread evenly over the tokens
  of the later chunk (a chunk of 3 tokens after 30 ms counts three 10 ms gaps), so
  a server that sends tokens in bunches is not flattered by zero gaps;
- short: requests that ended with fewer tokens than ``max_tokens`` (the workload
  never asks for an early stop: a short one means the model emitted EOS).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluicebench.generate.client import LoopResult, Trace
from sluicebench.generate.workload import Request
from sluicebench.loadgen.stats import percentile

# Issue 30, section 5: reported PASS/MISS, never asserted.
TARGET_OVER_WHOLE_BATCH = 2.0
TARGET_OVER_RAY = 2.0
TARGET_OF_ENGINE = 0.8
TARGET_OPEN_TTFT_P99_MS = 300.0
TARGET_ITL_P99_OVER_STEP = 3.0


def _ms(x: float) -> float:
    return round(x * 1000.0, 2)


def _pct(xs: Sequence[float], q: float) -> float | None:
    return _ms(percentile(xs, q)) if xs else None


def gaps(trace: Trace) -> list[float]:
    out: list[float] = []
    for (t0, _), (t1, n) in zip(trace.chunks, trace.chunks[1:], strict=False):
        out.extend([(t1 - t0) / n] * n)
    return out


def window_tokens(traces: Sequence[Trace], lo: float, hi: float) -> int:
    return sum(n for t in traces for at, n in t.chunks if lo <= at <= hi)


def summarize(loop: LoopResult) -> dict[str, Any]:
    ok = [t for t in loop.traces if t.ok]
    ttft = [t.chunks[0][0] - t.sent_s for t in ok if t.chunks]
    itl = [g for t in ok for g in gaps(t)]
    lo, hi = (loop.start_s + w for w in loop.window_s)
    span = hi - lo
    errors = [t.error for t in loop.traces if t.error]
    return {
        "requests": len(loop.traces),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "short": sum(1 for t in ok if t.tokens < t.max_tokens),
        "cut": loop.cut,
        "output_tokens": sum(t.tokens for t in ok),
        "window_s": round(span, 2),
        "wall_s": round(loop.wall_s, 2),
        "tokens_per_s": round(window_tokens(ok, lo, hi) / span, 1) if span > 0 else None,
        "requests_per_s": round(len(ok) / loop.wall_s, 2) if loop.wall_s > 0 else None,
        "ttft_p50_ms": _pct(ttft, 50),
        "ttft_p99_ms": _pct(ttft, 99),
        "itl_p50_ms": _pct(itl, 50),
        "itl_p99_ms": _pct(itl, 99),
    }


def open_rate(tokens_per_s: float | None, reqs: Sequence[Request], fraction: float) -> float:
    """The open loop's Poisson rate (requests/s) when none is given: ``fraction`` of a
    closed loop's capacity, its tokens/s over the workload's mean output."""
    mean = sum(r.max_tokens for r in reqs) / len(reqs)
    return round((tokens_per_s or 0.0) / mean * fraction, 3)


def with_cpu(summary: dict[str, Any], cpu: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The summary with the system's CPU by role and its output tokens per CPU second
    (all its processes): a figure the other tenants of a shared machine move less
    than tokens/s, since a starved process also spends less CPU."""
    total = sum(r["cpu_s"] for r in cpu.values())
    per_cpu = round(summary["output_tokens"] / total, 1) if total > 0 else None
    return summary | {"cpu": cpu, "cpu_s": round(total, 2), "tokens_per_cpu_s": per_cpu}


def _div(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _closed_tps(systems: dict[str, Any], name: str) -> float | None:
    s = systems.get(name)
    if not s or s.get("skipped"):
        return None
    value = s["closed"]["tokens_per_s"]
    return None if value is None else float(value)


def ratios(systems: dict[str, Any]) -> dict[str, float | None]:
    """(a)'s closed-loop tokens/s over (b), (c), (d) and (e)."""
    a = _closed_tps(systems, "a")
    return {f"a_over_{n}": _div(a, _closed_tps(systems, n)) for n in ("b", "c", "d", "e")}


def _verdict(value: float | None, bound: float, at_least: bool) -> str:
    if value is None:
        return "n/a"
    return "PASS" if (value >= bound if at_least else value <= bound) else "MISS"


def median_step_ms(systems: dict[str, Any]) -> tuple[float | None, str]:
    """The step the inter-token target is held against: the engine's own median step
    in its open loop (e), else (a)'s open-loop inter-token median."""
    e = systems.get("e")
    if e and not e.get("skipped") and e.get("open", {}).get("median_step_ms"):
        return float(e["open"]["median_step_ms"]), "(e) open-loop median step"
    a = systems.get("a")
    if a and not a.get("skipped") and a.get("open", {}).get("itl_p50_ms"):
        return float(a["open"]["itl_p50_ms"]), "(a) open-loop inter-token p50"
    return None, "none measured"


def targets(systems: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of the issue with this run's value and PASS, MISS or n/a."""
    r = ratios(systems)
    a_open = systems.get("a", {}).get("open", {}) if not systems.get("a", {}).get("skipped") else {}
    step, step_from = median_step_ms(systems)
    itl99 = a_open.get("itl_p99_ms")
    itl_ratio = _div(itl99, step)
    rows = [
        ("(a) tokens/s >= 2x (b)", r["a_over_b"], TARGET_OVER_WHOLE_BATCH, True, ""),
        ("(a) tokens/s >= 2x (c)", r["a_over_c"], TARGET_OVER_RAY, True, ""),
        ("(a) tokens/s >= 0.8x (e)", r["a_over_e"], TARGET_OF_ENGINE, True, ""),
        (
            "(a) open TTFT p99 <= 300 ms",
            a_open.get("ttft_p99_ms"),
            TARGET_OPEN_TTFT_P99_MS,
            False,
            "",
        ),
        (
            "(a) open inter-token p99 <= 3x median step",
            itl_ratio,
            TARGET_ITL_P99_OVER_STEP,
            False,
            f"p99 {itl99} ms / {step} ms, {step_from}",
        ),
    ]
    return [
        {
            "target": name,
            "value": value,
            "bound": bound,
            "verdict": _verdict(value, bound, ge),
            "note": note,
        }
        for name, value, bound, ge, note in rows
    ]
