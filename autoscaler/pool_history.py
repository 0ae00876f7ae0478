"""The warm pool's history in Redis (``warm_pool.size: auto``, docs/adr/0156).

Each closed minute (:class:`sluice.records.PoolMinute`) is added to the model's
sorted set (``keys.pool_history_key``), scored by its wall-clock start; minutes
older than the history window are trimmed on each write, and the key expires a
window after the last one. A restarted autoscaler reads them back
(:meth:`PoolHistory.load`) and sizes the pool from them at once. A failed read
starts from an empty history (the initial size); a failed write is logged once
per outage and dropped: recording must never stop scaling.
"""

from __future__ import annotations

import logging

import redis

from autoscaler.pool_size import PoolState
from sluice import keys
from sluice.backoff import Reconnect
from sluice.queue.client import REDIS_ERRORS
from sluice.records import PoolMinute

log = logging.getLogger("sluice.autoscaler")


class PoolHistory:
    def __init__(self, r: redis.Redis) -> None:
        self.redis = r
        self.outages: dict[str, Reconnect] = {}

    def load(self, model: str, now_s: float, history_s: float) -> PoolState:
        """The minutes within the window, oldest first (empty when unreadable)."""
        try:
            raw = self.redis.zrangebyscore(keys.pool_history_key(model), now_s - history_s, "+inf")
        except (redis.RedisError, *REDIS_ERRORS) as e:
            log.warning(
                "autoscaler: %s: reading the pool history failed (%s): starting over", model, e
            )
            return PoolState()
        minutes = []
        for member in raw:
            try:
                text = member.decode() if isinstance(member, bytes) else str(member)
                minutes.append(PoolMinute.from_json(text))
            except ValueError as e:
                log.warning("autoscaler: %s: %s: skipped", model, e)
        return PoolState(tuple(sorted(minutes, key=lambda m: m.start_s)))

    def save(self, model: str, minute: PoolMinute, history_s: float) -> None:
        key = keys.pool_history_key(model)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(key, {minute.to_json(): minute.start_s})
        pipe.zremrangebyscore(key, "-inf", f"({minute.start_s - history_s}")
        pipe.expire(key, int(history_s) + 60)
        outage = self.outages.setdefault(
            model, Reconnect(log, f"autoscaler: {model}: pool history")
        )
        try:
            pipe.execute()
        except (redis.RedisError, *REDIS_ERRORS) as e:
            outage.failed(e)
            return
        outage.ok()
