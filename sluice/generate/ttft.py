"""Time to first token, read back: the step script's histogram windows
(``keys.ttft_hist_key``, the wait histogram's layout in ``sluice.records``) as
counts per bucket and a quantile, for the autoscaler and the dashboard."""

from __future__ import annotations

from typing import Any

import redis

from sluice import keys, waits
from sluice.queue.scripts import Call


def ttft_call(model: str, now_s: float, span_s: float = waits.RECENT_S) -> Call[list[int]]:
    """Counts per ``waits.LABELS`` slot over the windows of the last ``span_s``
    (``now_s``: the server's clock, as the script writes by it)."""
    starts = waits.recent_windows(now_s, span_s)
    cmds: list[tuple[Any, ...]] = [("HGETALL", keys.ttft_hist_key(model, w)) for w in starts]
    return Call(waits.merge, commands=cmds)


def ttft_counts(
    r: redis.Redis, model: str, now_s: float, span_s: float = waits.RECENT_S
) -> list[int]:
    call = ttft_call(model, now_s, span_s)
    pipe = r.pipeline(transaction=False)
    for cmd in call.commands:
        pipe.execute_command(*cmd)
    return call.parse(pipe.execute())


def ttft_quantile_ms(
    r: redis.Redis, model: str, now_s: float, q: float = 0.99, span_s: float = waits.RECENT_S
) -> float | None:
    """The q-quantile's bucket bound (conservative) over the recent windows; None
    when no job of the model had its first token then."""
    return waits.quantile_ms(ttft_counts(r, model, now_s, span_s), q)
