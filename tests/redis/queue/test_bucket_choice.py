"""The claim script's bucket choice (pick_bucket in claim.lua) is what its Python
reference, autoscaler/sim/dispatch.py's hrrn_pick, says, on one table of cases."""

from __future__ import annotations

import pytest
import redis

from autoscaler.sim.dispatch import hrrn_pick
from sluice import keys
from sluice.jobs import NewJob
from sluice.queue import QueueClient
from tests.conftest import make_config

pytestmark = pytest.mark.redis
BUCKETS = ("32", "128", "512")
OVERDUE = 20.0  # batching.overdue_factor's default
SERVICE_MS = {"32": 10.0, "128": 40.0, "512": 160.0}

# Per case: the head's wait in ms per bucket (None: that queue is empty). Waits sit
# far from every tie and overdue boundary, so the milliseconds between writing
# them and the claim cannot change the answer.
CASES = {
    "one queue": (None, 500, None),
    "fresh heads: the short bucket's ratio wins": (50, 50, 50),
    "a long wait in the big bucket beats a short one": (20, None, 3000),
    "ratios, not waits: 128 at 9x beats 512 at 4x": (None, 320, 480),
    "overdue (> 20 x service) goes first": (150, 100, 4000),
    "two overdue: the oldest, not the highest ratio": (900, 1000, 100),
    "all empty": (None, None, None),
}


@pytest.mark.parametrize("waits", CASES.values(), ids=list(CASES))
def test_the_script_picks_the_bucket_its_reference_picks(
    r: redis.Redis, waits: tuple[int | None, ...]
) -> None:
    r.flushall()
    q = QueueClient(r, dict(make_config().models))
    secs, micros = r.time()
    now_ms = secs * 1000 + micros // 1000
    times_s, heads = [], []
    for bucket, wait in zip(BUCKETS, waits, strict=True):
        if wait is None:
            heads.append(None)
            continue
        [sub] = q.submit("m", [NewJob(input="x", bucket=bucket, cost=1)])
        r.hset(keys.job_key("m", sub.id), "enq", now_ms - wait)
        heads.append(len(times_s))
        times_s.append((now_ms - wait) / 1000)
    expected_s = [SERVICE_MS[b] / 1000 for b in BUCKETS]
    want = hrrn_pick(times_s, expected_s, OVERDUE)(heads, now_ms / 1000)

    batch = q.claim("m", "w1", service_ms=SERVICE_MS)
    assert batch.bucket == (BUCKETS[want] if want >= 0 else "")
    if want >= 0:
        assert len(batch) == 1
