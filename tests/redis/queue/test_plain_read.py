"""The gateway's one-command read (``QueueOps.get_plain``, ADR 0168): a job without a
webhook reads exactly as the two-command ``get`` reads it; one with a webhook is
left to ``get``, whose delivery its view shows."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from sluice import keys
from sluice.errors import JobNotFound
from sluice.jobs import JobStatus, NewJob, Outcome, Owner, Webhook
from sluice.queue import QueueClient

pytestmark = pytest.mark.redis

Factory = Callable[..., QueueClient]


def test_a_job_without_a_webhook_reads_as_get_reads_it(
    r: redis.Redis, queue_factory: Factory
) -> None:
    qc = queue_factory()
    job = NewJob({"text": "a b"}, "32", 2, metadata={"k": [1, 2.5]}, deadline_ms=60_000)
    [sub] = qc.submit("m", [job], owner=Owner("alice"))
    queued = qc.run(qc.ops.get_plain(sub.id))
    assert queued == qc.run(qc.ops.get(sub.id)) and queued is not None
    assert queued.status is JobStatus.QUEUED and queued.owner == "alice"
    qc.claim("m", "w")
    assert qc.run(qc.ops.get_plain(sub.id)) == qc.run(qc.ops.get(sub.id))
    qc.complete("m", [Outcome.ok(sub.id, {"embedding": [0.5, -1.25]})], "w")
    ended = qc.run(qc.ops.get_plain(sub.id))
    assert ended == qc.run(qc.ops.get(sub.id))
    assert ended is not None and ended.view() == qc.run(qc.ops.get(sub.id)).view()
    assert ended.result == {"embedding": [0.5, -1.25]} and ended.webhook is None


def test_a_job_with_a_webhook_is_left_to_the_full_read(
    r: redis.Redis, queue_factory: Factory
) -> None:
    qc = queue_factory()
    [sub] = qc.submit("m", [NewJob("x", "32", 1, webhook=Webhook("http://receiver.invalid/h"))])
    assert qc.run(qc.ops.get_plain(sub.id)) is None
    full = qc.run(qc.ops.get(sub.id))
    assert full.webhook is not None and full.webhook["state"] == "waiting"


def test_a_missing_job_is_not_found(r: redis.Redis, queue_factory: Factory) -> None:
    qc = queue_factory()
    [sub] = qc.submit("m", [NewJob("x", "32", 1)])
    assert r.delete(keys.job_key("m", sub.id)) == 1  # one key: a Cluster has no cross-node KEYS
    with pytest.raises(JobNotFound):
        qc.run(qc.ops.get_plain(sub.id))
