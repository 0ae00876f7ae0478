"""The bulk coordinator tests' config, fixtures' parts and upload (tests/redis/bulk:
test_coordinator.py, test_rq.py): model ``m`` with a small bulk feed."""

from __future__ import annotations

import time

from sluice.bulk.ops import BulkOps, new_bulk_id
from sluice.config import SluiceConfig, parse_config
from sluice.queue import QueueClient

MODEL = "m"


def config(**bulk: object) -> SluiceConfig:
    return parse_config(
        {
            "models": {
                MODEL: {
                    "handler": "synthetic",
                    "buckets": [8, 64],
                    "cost": {"method": "words"},
                    "bulk": {"max_queued": 6},
                    "batching": {"max_batch": 4},
                }
            },
            "bulk": {"lease_s": 0.5, "poll_s": 0.01, "feed_chunk": 5, **bulk},
        }
    )


def upload(q: QueueClient, cfg: SluiceConfig, lines: list[str], owner: str | None = None) -> str:
    ops = BulkOps(list(cfg.models), cfg.bulk.ttl_s)
    bulk_id = new_bulk_id(MODEL)
    q.run(ops.create(MODEL, bulk_id, lines, owner, int(time.time() * 1000), 500))
    return bulk_id
