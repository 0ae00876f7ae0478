"""The loop's housekeeping writes to Redis, kept out of the read: reclaim and prune.

- **Reclaim**, before each read: requeue (or dead-letter) the model's expired leases.
  Otherwise only a worker's claim does, and a model at zero workers would keep them
  ``running`` forever (nothing queued, so nothing wakes it).
- **Prune**, after a read that found them: forget registry entries whose heartbeat
  lapsed (a worker that died without deregistering), each only if it is still
  lapsed when the script runs (``prune_workers.lua``).

A failure loses only this period's upkeep, never the decision: it is logged once
per outage (ADR 0065), and a failed reclaim is counted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

import redis

from autoscaler.metrics import AutoscalerMetrics
from sluice import registry
from sluice.backoff import Reconnect
from sluice.errors import SluiceError
from sluice.queue import QueueClient
from sluice.queue.client import REDIS_ERRORS
from sluice.queue.scripts import Call

log = logging.getLogger("sluice.autoscaler")
UPKEEP_ERRORS = (SluiceError, redis.RedisError, *REDIS_ERRORS)


class Upkeep:
    """Reclaims and prunes for each model; one outage log per model and chore."""

    def __init__(self, client: QueueClient, metrics: AutoscalerMetrics) -> None:
        self.client = client
        self.metrics = metrics
        self.outages: dict[tuple[str, str], Reconnect] = {}

    def _outage(self, model: str, chore: str) -> Reconnect:
        key = (model, chore)
        if key not in self.outages:
            self.outages[key] = Reconnect(log, f"autoscaler: {model}: {chore}")
        return self.outages[key]

    def reclaim(self, model: str) -> int | None:
        """Expired leases requeued or dead-lettered; None if Redis failed."""
        outage = self._outage(model, "reclaim")
        try:
            n = self.client.reclaim(model)
        except UPKEEP_ERRORS as e:
            outage.failed(e)  # the period is the retry interval; the delay is unused
            self.metrics.reclaim_errors.labels(model).inc()
            return None
        outage.ok()
        if n:
            self.metrics.reclaimed.labels(model).inc(n)
            log.info(json.dumps({"event": "autoscaler_reclaimed", "model": model, "reclaimed": n}))
        return n

    def prune(self, model: str, stale_ids: Sequence[str]) -> None:
        """Forget the lapsed workers a read found (no round trip when there are none)."""
        if not stale_ids:
            return
        outage = self._outage(model, "prune")
        try:
            self.client.run(Call(lambda r: r, commands=registry.prune(model, list(stale_ids))))
        except UPKEEP_ERRORS as e:
            outage.failed(e)
            return
        outage.ok()
