"""The live status line of ``sluice up``: workers, queue depth, jobs/s, p99 wait."""

from __future__ import annotations

import time
from dataclasses import dataclass

from sluice import keys
from sluice.config import SluiceConfig
from sluice.queue import QueueClient
from sluice.queue.scripts import Call
from sluice.records import Stat
from sluice.registry import list_workers_call, workers_by_state

WINDOW_S = 10  # the claim script's histogram window
WAIT_BOUNDS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)


@dataclass(frozen=True)
class ModelLine:
    model: str
    workers: dict[str, int]
    queued: int
    done: int  # jobs ended (succeeded + failed) since the queue's counters began
    p99_wait_ms: float | None


def p99_from_hist(hists: list[dict[str, str]]) -> float | None:
    """Upper bound of the histogram bucket holding the 99th percentile."""
    labels = [str(b) for b in WAIT_BOUNDS_MS] + ["inf"]
    counts = [sum(int(h.get(label, 0) or 0) for h in hists) for label in labels]
    total = sum(counts)
    if not total:
        return None
    seen = 0
    for bound, c in zip([*WAIT_BOUNDS_MS, float("inf")], counts, strict=True):
        seen += c
        if seen >= 0.99 * total:
            return float(bound)
    return float("inf")


def _recent_hists(
    model: str, now_s: float, span_s: float = 60, parts: int = 1
) -> Call[list[dict[str, str]]]:
    """The last ``span_s`` of wait histograms, every partition's (pooled by the reader)."""
    last = int(now_s // WINDOW_S) * WINDOW_S
    starts = range(last - int(span_s) + WINDOW_S, last + 1, WINDOW_S)
    cmds = [("HGETALL", keys.wait_hist_key(model, s, p)) for p in range(parts) for s in starts]
    return Call(list, commands=cmds)


def read_line(q: QueueClient, model: str, now_s: float) -> ModelLine:
    stats = q.stats(model)
    live, _ = q.run(list_workers_call(model))
    hists = q.run(_recent_hists(model, now_s, parts=q.ops.parts.span(model)))
    done = stats.counters.get(Stat.SUCCEEDED, 0) + stats.counters.get(Stat.FAILED, 0)
    return ModelLine(model, workers_by_state(live), stats.queued, done, p99_from_hist(hists))


class LiveStatus:
    """Formats one line per model; jobs/s is the change of `done` between calls."""

    def __init__(self, q: QueueClient, cfg: SluiceConfig) -> None:
        self.q, self.cfg = q, cfg
        self._last: dict[str, tuple[float, int]] = {}

    def render(self, now_s: float | None = None) -> str:
        now = time.time() if now_s is None else now_s
        parts = []
        for model in self.cfg.models:
            line = read_line(self.q, model, now)
            prev_t, prev_done = self._last.get(model, (now, line.done))
            rate = (line.done - prev_done) / (now - prev_t) if now > prev_t else 0.0
            self._last[model] = (now, line.done)
            w = line.workers
            p99 = "-" if line.p99_wait_ms is None else f"{line.p99_wait_ms:.0f} ms"
            parts.append(
                f"{model}: workers {w['ready']} ready/{w['starting']} starting/"
                f"{w['draining']} draining, queued {line.queued}, {rate:.1f} jobs/s, p99 wait {p99}"
            )
        return " | ".join(parts)
