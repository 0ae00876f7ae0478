"""The autoscaler's recent decisions, kept in Redis for the dashboard.

Every period the latest decision overwrites one small hash (current, desired,
reason, when); a decision that differs from the previous one recorded for the
model (other current, desired or reason) is also pushed onto a bounded list,
so the dashboard's log shows what changed and why, not one "steady" line per
period. Both keys expire: a stopped autoscaler leaves nothing behind for long,
and the hash's age tells the page whether an autoscaler is running at all.
A failed write is logged and dropped: recording must never stop scaling.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import redis

from autoscaler.observation import Observation
from autoscaler.policy import Decision
from sluice import keys
from sluice.backoff import Reconnect
from sluice.queue.client import REDIS_ERRORS
from sluice.records import DECISION_PERIOD_FIELD, DecisionRecord

log = logging.getLogger("sluice.autoscaler")
LOG_LENGTH = 50  # decisions kept per model (newest first)
LOG_TTL_S = 86_400
STATE_TTL_MIN_S = 60  # the latest decision outlives a few missed periods, then expires


def entry(d: Decision, obs: Observation | None, at_ms: int) -> DecisionRecord:
    e = _entry(d, obs, at_ms)
    if d.pool is None:
        return e
    return replace(e, pool=d.pool.size, pool_reason=d.pool.reason)


def _entry(d: Decision, obs: Observation | None, at_ms: int) -> DecisionRecord:
    if obs is None or obs.missing:
        return DecisionRecord(at_ms, d.current, d.desired, d.reason, d.needed)
    e = DecisionRecord(
        at_ms,
        d.current,
        d.desired,
        d.reason,
        d.needed,
        obs.ready,
        obs.starting,
        obs.queued,
        obs.p99_wait_ms,
        d.state.saturation.why if d.reason == "saturated" else "",
    )
    g = obs.generate
    if g is None:
        return e
    tps = None if g.tokens_per_s is None else round(g.tokens_per_s, 1)
    return replace(
        e,
        slots_busy=g.slots_busy,
        slots_total=g.slots_total,
        ttft_p99_ms=g.ttft_p99_ms,
        tokens_per_s=tps,
    )


def commands(
    model: str, e: DecisionRecord, period_s: float, changed: bool
) -> list[tuple[Any, ...]]:
    """Redis commands (one pipeline) that record ``e``; ``changed`` appends it to the log."""
    state = keys.scale_state_key(model)
    flat = {k: "" if v is None else v for k, v in e.fields().items()}
    cmds: list[tuple[Any, ...]] = [
        ("HSET", state, *(x for kv in flat.items() for x in kv), DECISION_PERIOD_FIELD, period_s),
        ("EXPIRE", state, max(STATE_TTL_MIN_S, int(10 * period_s))),
    ]
    if changed:
        log_key = keys.decisions_key(model)
        cmds += [
            ("LPUSH", log_key, json.dumps(e.fields(), separators=(",", ":"))),
            ("LTRIM", log_key, 0, LOG_LENGTH - 1),
            ("EXPIRE", log_key, LOG_TTL_S),
        ]
    return cmds


class DecisionLog:
    """Records each model's decisions; remembers the last one logged per model."""

    def __init__(self, r: redis.Redis, wall: Callable[[], float] = time.time) -> None:
        self.redis = r
        self.wall = wall
        self.last: dict[str, tuple[int, int, str, int | None]] = {}
        self.outages: dict[str, Reconnect] = {}

    def record(self, model: str, d: Decision, obs: Observation | None, period_s: float) -> None:
        e = entry(d, obs, int(self.wall() * 1000))
        changed = self.last.get(model) != e.signature
        pipe = self.redis.pipeline(transaction=False)
        for cmd in commands(model, e, period_s, changed):
            pipe.execute_command(*cmd)
        outage = self.outages.setdefault(model, Reconnect(log, f"autoscaler: {model}: record"))
        try:
            pipe.execute()
        except (redis.RedisError, *REDIS_ERRORS) as err:
            outage.failed(err)  # one log line per outage (ADR 0065)
            return
        outage.ok()
        self.last[model] = e.signature
