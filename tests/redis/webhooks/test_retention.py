"""What a webhook keeps in Redis, read from a real server before and after its
delivery ends (docs/webhooks.md, "What is kept"): the job outlives its result TTL
only while its delivery is pending; an ended delivery keeps its attempt log and
no copy of the job's result."""

from __future__ import annotations

from typing import Any

import pytest

from sluice import keys
from sluice.config import SluiceConfig, parse_config
from sluice.jobs import NewJob, Outcome, Webhook
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.records import HOOK_TTL_S
from sluice.webhooks.ops import DEAD_TTL_S, DELIVERED_TTL_S, WebhookOps
from sluice.webhooks.ops import scripts as webhook_scripts
from tests.kit.receiver import receiving
from tests.kit.webhooks import hook_config, notifier
from tests.waits import wait_until

RESULT_TTL_S = 120
MARKER = "result-marker-7f3a"  # a value only the job's result holds


@pytest.fixture
def cfg() -> SluiceConfig:
    raw = hook_config().model_dump(mode="json", exclude_unset=True)
    for m in raw["models"].values():
        m["queue"] = {"result_ttl_s": RESULT_TTL_S}
    return parse_config(raw)


@pytest.fixture
def q(redis_url: str, cfg: SluiceConfig):  # type: ignore[no-untyped-def]
    client = QueueClient(connect(redis_url), dict(cfg.models))
    client.register(webhook_scripts())
    yield client
    client.redis.close()


def ended_job(q: QueueClient, url: str) -> str:
    job_id = q.submit("m", [NewJob("hi", "32", 1, webhook=Webhook(url))])[0].id
    batch = q.claim("m", "w1")
    q.complete("m", [Outcome.ok(batch.jobs[0].id, {"text": MARKER})], "w1")
    return job_id


def state(q: QueueClient, job_id: str) -> Any:
    return q.redis.hget(keys.delivery_key("m", job_id), "state")


def assert_no_result_copy(q: QueueClient, job_id: str) -> None:
    record = q.redis.hgetall(keys.delivery_key("m", job_id))
    assert record and "body" not in record, record
    assert not any(MARKER in v for v in record.values()), record


def test_a_pending_delivery_holds_the_job_then_it_falls_back_to_its_result_ttl(
    q: QueueClient, cfg: SluiceConfig, redis_url: str
) -> None:
    with receiving([500]) as rx:  # the first attempt fails: the retry renders again
        job_id = ended_job(q, rx.url)
        jk = keys.job_key("m", job_id)
        # Pending: the job (and its result) lives as long as its delivery may.
        assert q.redis.ttl(jk) > HOOK_TTL_S - 60
        assert q.redis.ttl(keys.delivery_key("m", job_id)) > HOOK_TTL_S - 60
        with notifier(cfg, redis_url):
            wait_until(lambda: state(q, job_id) == "delivered", what="delivery")
        assert len(rx.calls) == 2 and rx.calls[0].body == rx.calls[1].body
        assert MARKER.encode() in rx.calls[1].body  # read from the job's record
    assert 0 < q.redis.ttl(jk) <= RESULT_TTL_S
    assert DELIVERED_TTL_S - 60 < q.redis.ttl(keys.delivery_key("m", job_id)) <= DELIVERED_TTL_S
    assert_no_result_copy(q, job_id)
    view = q.run(WebhookOps(["m", "n"]).view(job_id))
    # The attempt log, as docs/webhooks.md describes its fields.
    assert view is not None and [set(a) for a in view.log] == [{"at", "status", "ms", "error"}] * 2
    assert [(a["status"], a["error"]) for a in view.log] == [(500, "HTTP 500"), (200, "")]
    assert view.log[0]["at"] <= view.log[1]["at"] and all(a["ms"] >= 0 for a in view.log)
    assert 1e12 < view.log[0]["at"] < 1e14  # ms since the epoch


def test_a_given_up_delivery_lets_the_job_go_and_a_redelivery_holds_it_again(
    q: QueueClient, cfg: SluiceConfig, redis_url: str
) -> None:
    ops = WebhookOps(["m", "n"])
    with receiving([410]) as rx:
        job_id = ended_job(q, rx.url)
        jk = keys.job_key("m", job_id)
        with notifier(cfg, redis_url):
            wait_until(lambda: state(q, job_id) == "dead", what="given up")
            assert 0 < q.redis.ttl(jk) <= RESULT_TTL_S
            assert q.redis.ttl(keys.delivery_key("m", job_id)) > DEAD_TTL_S - 60
            assert_no_result_copy(q, job_id)
            assert q.run(ops.redeliver(job_id, HOOK_TTL_S)) == "dead"
            assert q.redis.ttl(jk) > HOOK_TTL_S - 60  # pending again: held again
            wait_until(lambda: state(q, job_id) == "delivered", what="redelivery")
        assert rx.calls[0].body == rx.calls[1].body and MARKER.encode() in rx.calls[1].body
    assert 0 < q.redis.ttl(jk) <= RESULT_TTL_S
    assert_no_result_copy(q, job_id)


def test_a_dead_lettered_job_keeps_its_own_longer_ttl_after_its_delivery(
    q: QueueClient, cfg: SluiceConfig, redis_url: str
) -> None:
    dead_ttl_s = cfg.models["m"].queue.dead_letter_ttl_s  # 7 days: more than the hold
    with receiving() as rx:
        job_id = q.submit("m", [NewJob("hi", "32", 1, webhook=Webhook(rx.url))])[0].id
        batch = q.claim("m", "w1")
        q.complete("m", [Outcome.fail(batch.jobs[0].id, "bad_input", "no")], "w1")
        assert q.get(job_id).status.value == "failed"
        with notifier(cfg, redis_url):
            wait_until(lambda: state(q, job_id) == "delivered", what="delivery")
    assert dead_ttl_s - 60 < q.redis.ttl(keys.job_key("m", job_id)) <= dead_ttl_s
