"""The backlog cost counters return to exactly what remains queued."""

from __future__ import annotations

import pytest
import redis

from sluice import keys
from sluice.jobs import NewJob, Outcome
from sluice.queue import QueueClient
from tests.conftest import make_config

pytestmark = pytest.mark.redis


def _counters(r: redis.Redis) -> tuple[int, int]:
    stats = r.hgetall(keys.stats_key("m"))
    return int(stats.get("queued_cost", 0)), int(stats.get("cost:32", 0))


@pytest.mark.parametrize("garbage", ["lots", "", "1e999x"])
def test_a_malformed_record_with_a_garbage_cost_leaves_no_cost_behind(
    r: redis.Redis, garbage: str
) -> None:
    q = QueueClient(r, dict(make_config(batching={"max_batch": 1}).models))
    bad, good, rest = (
        s.id
        for s in q.submit(
            "m",
            [
                NewJob(input=n, bucket="32", cost=c)
                for n, c in (("bad", 10), ("good", 7), ("rest", 5))
            ],
        )
    )
    assert _counters(r) == (22, 22)
    r.hset(keys.job_key("m", bad), "cost", garbage)  # its 10 is now unknowable from the record

    batch = q.claim("m", "w")  # fails the bad record, leases the good one
    assert [j.id for j in batch.jobs] == [good]
    assert r.hget(keys.job_key("m", bad), "status") == "failed"
    assert _counters(r) == (5, 5), "the malformed record's cost stayed in the counters"

    q.complete("m", [Outcome.ok(good, None)])
    last = q.claim("m", "w")
    assert [j.id for j in last.jobs] == [rest]
    assert _counters(r) == (0, 0)
