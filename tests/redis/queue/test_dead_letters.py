"""The dead-letter list and the failed records it names live and die together."""

from __future__ import annotations

import pytest
import redis

from sluice import keys
from sluice.jobs import NewJob, Outcome
from sluice.queue import QueueClient
from tests.conftest import make_config

pytestmark = pytest.mark.redis
CAP = 10_000  # _common.lua DEAD_CAP


def _fail_one(q: QueueClient, tag: str) -> str:
    job = q.submit("m", [NewJob(input=tag, bucket="32", cost=1)])[0].id
    (claimed,) = q.claim("m", "w").jobs
    q.complete("m", [Outcome.fail(claimed.id, "x", tag)])
    return job


def test_a_record_leaves_with_its_id_when_the_list_is_full(r: redis.Redis) -> None:
    q = QueueClient(r, dict(make_config().models))
    oldest = _fail_one(q, "oldest")
    # Ids of other failed jobs, whose records exist, fill the list up to the cap.
    fillers = [f"m.fill{i}" for i in range(CAP - 1)]
    pipe = r.pipeline(transaction=False)
    for fid in fillers:
        pipe.hset(keys.job_key("m", fid), mapping={"status": "failed", "input": "x"})
    pipe.lpush(keys.dead_letter_key("m"), *fillers)
    pipe.execute()
    assert r.exists(keys.job_key("m", oldest))

    newest = _fail_one(q, "newest")  # pushes the oldest id off the end

    assert r.llen(keys.dead_letter_key("m")) == CAP
    assert not r.exists(keys.job_key("m", oldest)), "the record outlived its dead-letter id"
    assert r.exists(keys.job_key("m", newest))
    assert q.dead_letters("m", limit=1) == [newest]


def test_the_count_drops_ids_whose_record_expired(r: redis.Redis) -> None:
    q = QueueClient(r, dict(make_config().models))
    first, second = _fail_one(q, "a"), _fail_one(q, "b")
    r.delete(keys.job_key("m", first))  # what dead_letter_ttl_s does to the oldest
    q.reclaim("m")  # the autoscaler's periodic reclaim, no new failure needed
    assert q.stats("m").dead_lettered == 1
    assert q.dead_letters("m") == [second]

    r.delete(keys.job_key("m", second))
    third = _fail_one(q, "c")  # a new failure trims the tail too
    assert q.stats("m").dead_lettered == 1
    assert q.dead_letters("m") == [third]
