"""Webhook deliveries end to end on a real Redis: the scripts that end jobs enqueue
them, a notifier (in a thread) signs and sends them to a real HTTP receiver on
loopback, retries at the schedule, gives up to the dead-letter list."""

from __future__ import annotations

import json
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook as Verifier

from sluice import keys
from sluice.bulk.ops import BulkOps, new_bulk_id
from sluice.bulk.ops import scripts as bulk_scripts
from sluice.config import SluiceConfig
from sluice.jobs import NewJob, Outcome, Webhook
from sluice.local.redis_server import free_port
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.webhooks.ops import WebhookOps
from sluice.webhooks.ops import scripts as webhook_scripts
from tests.kit.receiver import Receiver, receiving
from tests.kit.webhooks import SECRET, hook_config, notifier
from tests.waits import wait_until


@pytest.fixture
def cfg() -> SluiceConfig:
    return hook_config()


@pytest.fixture
def q(redis_url: str, cfg: SluiceConfig):  # type: ignore[no-untyped-def]
    client = QueueClient(connect(redis_url), dict(cfg.models))
    client.register(webhook_scripts())
    client.register(bulk_scripts())
    yield client
    client.redis.close()


def submit(
    q: QueueClient, url: str, events: tuple[str, ...] | None = None, text: str = "hi"
) -> str:
    hook = Webhook(url, events) if events else Webhook(url)
    return q.submit("m", [NewJob(text, "32", 1, webhook=hook)])[0].id


def run_one(q: QueueClient, outcome: str = "ok", result: Any = None) -> str:
    batch = q.claim("m", "w1")
    job = batch.jobs[0]
    if outcome == "ok":
        q.complete("m", [Outcome.ok(job.id, result if result is not None else [0.5, 1.5])], "w1")
    else:
        q.complete("m", [Outcome.fail(job.id, "model_error", "boom")], "w1")
    return job.id


def verified(rx: Receiver, i: int = 0) -> dict[str, Any]:
    call = rx.calls[i]
    body: dict[str, Any] = Verifier(SECRET).verify(call.body, call.headers)
    return body


def delivery(q: QueueClient, job_id: str) -> dict[str, Any]:
    return q.get(job_id).webhook or {}


def test_a_finished_job_is_posted_once_signed_with_its_result(
    q: QueueClient, cfg: SluiceConfig, redis_url: str
) -> None:
    with receiving() as rx:
        job_id = submit(q, rx.url)
        assert delivery(q, job_id)["state"] == "waiting"
        run_one(q, result={"vector": [0.25, -1.0]})
        with notifier(cfg, redis_url):
            wait_until(lambda: delivery(q, job_id).get("state") == "delivered", what="delivery")
        body = verified(rx)
        assert len(rx.calls) == 1
        assert rx.calls[0].headers["webhook-id"] == f"msg_{job_id}"
        assert rx.calls[0].path == "/hook"
        assert body["type"] == "job.succeeded" and body["url"] == f"/v1/jobs/{job_id}"
        data = body["data"]
        assert data["id"] == job_id and data["status"] == "succeeded"
        assert data["result"] == {"vector": [0.25, -1.0]} and "webhook" not in data
    d = delivery(q, job_id)
    assert d["attempts"] == 1 and d["last_status"] == 200 and d["last_error"] is None
    assert d["url"] == rx.url and d["events"] == ["succeeded", "failed", "expired", "cancelled"]
    # the model's event stream has the end too
    entries = q.redis.xrange(keys.events_key("m"))
    assert any(fields.get(job_id) == "succeeded" for _, fields in entries)


def test_a_signature_made_with_another_secret_does_not_verify(
    q: QueueClient, cfg: SluiceConfig, redis_url: str
) -> None:
    with receiving() as rx:
        job_id = submit(q, rx.url)
        run_one(q)
        with notifier(cfg, redis_url):
            wait_until(lambda: delivery(q, job_id).get("state") == "delivered", what="delivery")
        other = Verifier("whsec_" + "A" * 43 + "=")
        with pytest.raises(Exception, match="signature"):
            other.verify(rx.calls[0].body, rx.calls[0].headers)
        tampered = rx.calls[0].body.replace(b"succeeded", b"failed")
        with pytest.raises(Exception, match="signature"):
            Verifier(SECRET).verify(tampered, rx.calls[0].headers)


def test_three_500s_then_200_is_delivered_on_the_fourth_attempt_at_the_schedule(
    q: QueueClient, redis_url: str
) -> None:
    cfg = hook_config(retry_schedule_s=[0.3, 0.6, 1.2])
    with receiving([500, 500, 500]) as rx:
        job_id = submit(q, rx.url)
        run_one(q)
        with notifier(cfg, redis_url):
            wait_until(lambda: delivery(q, job_id).get("state") == "delivered", what="delivery")
        assert len(rx.calls) == 4
        ids = {c.headers["webhook-id"] for c in rx.calls}
        assert ids == {f"msg_{job_id}"}  # every attempt is the same message
        assert len({c.body for c in rx.calls}) == 1
        gaps = [b.at - a.at for a, b in zip(rx.calls, rx.calls[1:], strict=False)]
        for gap, step in zip(gaps, [0.3, 0.6, 1.2], strict=True):
            assert gap >= step * 0.95, (gaps, "an attempt came before its backoff step")
    d = delivery(q, job_id)
    assert d["attempts"] == 4 and d["last_status"] == 200
    view = q.run(WebhookOps(["m", "n"]).view(job_id))
    assert view is not None and [a["status"] for a in view.log] == [500, 500, 500, 200]
    assert all(a["ms"] >= 0 for a in view.log)


def test_a_receiver_that_is_down_for_a_while_gets_it_when_it_is_back(
    q: QueueClient, cfg: SluiceConfig, redis_url: str
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    job_id = submit(q, url)
    run_one(q)
    with notifier(cfg, redis_url):
        wait_until(lambda: delivery(q, job_id).get("attempts", 0) >= 2, what="failed attempts")
        assert delivery(q, job_id)["state"] == "pending"
        assert "connection failed" in (delivery(q, job_id)["last_error"] or "")
        with receiving(port=port) as rx:
            wait_until(lambda: delivery(q, job_id).get("state") == "delivered", what="delivery")
            assert verified(rx)["data"]["id"] == job_id


def test_410_stops_at_once_and_redelivery_sends_the_same_message_again(
    q: QueueClient, cfg: SluiceConfig, redis_url: str
) -> None:
    ops = WebhookOps(["m", "n"])
    with receiving([410]) as rx:
        job_id = submit(q, rx.url)
        run_one(q)
        with notifier(cfg, redis_url):
            wait_until(lambda: delivery(q, job_id).get("state") == "dead", what="dead")
            assert q.run(ops.dead("m")) == [job_id]
            d = delivery(q, job_id)
            assert d["attempts"] == 1 and d["last_status"] == 410 and "410" in d["last_error"]
            assert q.run(ops.redeliver(job_id, 3600)) == "dead"
            wait_until(lambda: delivery(q, job_id).get("state") == "delivered", what="redelivery")
        assert q.run(ops.dead("m")) == []
        assert [c.headers["webhook-id"] for c in rx.calls] == [f"msg_{job_id}"] * 2
        assert rx.calls[0].body == rx.calls[1].body


def test_other_4xx_retry_a_few_times_then_give_up(q: QueueClient, redis_url: str) -> None:
    cfg = hook_config(max_client_error_attempts=3)
    with receiving([404] * 10) as rx:
        job_id = submit(q, rx.url)
        run_one(q)
        with notifier(cfg, redis_url):
            wait_until(lambda: delivery(q, job_id).get("state") == "dead", what="dead")
        assert len(rx.calls) == 3
    d = delivery(q, job_id)
    assert d["last_status"] == 404 and "3 such attempts" in d["last_error"]


def test_only_the_events_asked_for_are_sent(
    q: QueueClient, cfg: SluiceConfig, redis_url: str
) -> None:
    with receiving() as rx:
        quiet = submit(q, rx.url, events=("failed",))
        run_one(q)  # succeeded: not asked for
        assert delivery(q, quiet)["state"] == "not_sent"
        failing = submit(q, rx.url, events=("failed",))
        run_one(q, outcome="fail")
        cancelled = submit(q, rx.url, events=("cancelled",))
        q.cancel(cancelled)
        with notifier(cfg, redis_url):
            wait_until(lambda: len(rx.calls) >= 2, what="two deliveries")
            wait_until(
                lambda: all(
                    delivery(q, j).get("state") == "delivered" for j in (failing, cancelled)
                ),
                what="both delivered",
            )
        by_id = {verified(rx, i)["data"]["id"]: verified(rx, i) for i in range(len(rx.calls))}
        assert set(by_id) == {failing, cancelled}
        assert by_id[failing]["type"] == "job.failed"
        assert by_id[failing]["data"]["error"]["type"] == "model_error"
        assert by_id[cancelled]["type"] == "job.cancelled"
    assert q.redis.zcard(keys.deliveries_due_key("m")) == 0


def test_a_large_result_is_linked_not_sent(q: QueueClient, redis_url: str) -> None:
    cfg = hook_config(max_result_bytes=100, public_url="https://sluice.example")
    with receiving() as rx:
        job_id = submit(q, rx.url)
        run_one(q, result=[0.123456] * 100)
        with notifier(cfg, redis_url):
            wait_until(lambda: delivery(q, job_id).get("state") == "delivered", what="delivery")
        data = verified(rx)["data"]
        assert data["result"] is None
        assert data["result_omitted"]["url"] == f"https://sluice.example/v1/jobs/{job_id}"
        assert data["result_omitted"]["bytes"] > 100


def test_a_lapsed_lease_comes_due_again_and_the_late_notifier_cannot_record(
    q: QueueClient, cfg: SluiceConfig, redis_url: str
) -> None:
    ops = WebhookOps(["m", "n"])
    with receiving() as rx:
        job_id = submit(q, rx.url)
        run_one(q)
        (dead_one,) = q.run(ops.claim("m", "dead-notifier", 300, 10))  # then it "dies"
        assert dead_one.attempt == 1 and dead_one.token == "dead-notifier:1"
        assert q.run(ops.claim("m", "other", 300, 10)) == []  # leased: not due
        with notifier(cfg, redis_url):
            wait_until(lambda: delivery(q, job_id).get("state") == "delivered", what="delivery")
        assert delivery(q, job_id)["attempts"] == 2  # the dead one's attempt counts
        assert not q.run(ops.done(dead_one, "dead", error="late"))  # stale: nothing changes
        assert delivery(q, job_id)["state"] == "delivered"
        assert len(rx.calls) == 1


def test_refused_addresses_never_get_a_connection(q: QueueClient, redis_url: str) -> None:
    """Only 127.0.0.1 is opened: a delivery to 127.0.0.2 (another loopback address, as
    a rebound DNS name would give) and a redirect to it are refused at connect."""
    cfg = hook_config(max_client_error_attempts=2)
    with receiving() as allowed, receiving(host="127.0.0.2") as forbidden:
        allowed.statuses = [302, 302]
        allowed.location = forbidden.url
        direct = submit(q, forbidden.url)
        run_one(q)
        redirected = submit(q, allowed.url)
        run_one(q)
        with notifier(cfg, redis_url):
            wait_until(
                lambda: all(delivery(q, j).get("state") == "dead" for j in (direct, redirected)),
                what="both given up",
            )
        assert forbidden.connections == 0 and forbidden.calls == []
        assert "loopback" in delivery(q, direct)["last_error"]
        assert len(allowed.calls) == 2  # redirects are never followed
        assert delivery(q, redirected)["last_status"] == 302


def test_a_bulk_job_that_ends_is_posted(q: QueueClient, cfg: SluiceConfig, redis_url: str) -> None:
    bulk = BulkOps(["m", "n"], 3600)
    with receiving() as rx:
        bulk_id = new_bulk_id("m")
        hook = Webhook(rx.url, ("completed", "failed", "cancelled"))
        q.run(bulk.create("m", bulk_id, ['{"input": "a"}'], None, 0, 1000, hook, 3600))
        assert q.run(bulk.get(bulk_id)).webhook == {
            "url": rx.url, "events": ["completed", "failed", "cancelled"], "state": "waiting",
        }  # fmt: skip
        assert q.run(bulk.cancel(bulk_id)) == "queued"  # a queued bulk job ends at once
        with notifier(cfg, redis_url):
            wait_until(lambda: len(rx.calls) == 1, what="bulk delivery")
            wait_until(
                lambda: (q.run(bulk.get(bulk_id)).webhook or {}).get("state") == "delivered",
                what="delivered",
            )
        body = verified(rx)
        assert body["type"] == "bulk.cancelled" and body["data"]["id"] == bulk_id
        assert body["data"]["state"] == "cancelled" and body["url"] == f"/v1/bulk/{bulk_id}"


def test_without_a_secret_a_delivery_is_given_up_not_sent_unsigned(
    q: QueueClient, cfg: SluiceConfig, redis_url: str
) -> None:
    with receiving() as rx:
        job_id = submit(q, rx.url)
        run_one(q)
        with notifier(cfg, redis_url, env={}):
            wait_until(lambda: delivery(q, job_id).get("state") == "dead", what="dead")
        assert rx.connections == 0
        assert "secret" in delivery(q, job_id)["last_error"]
    assert json.loads(json.dumps(delivery(q, job_id)))  # plain JSON all the way


def test_the_documented_receiver_verifies_a_real_delivery(
    q: QueueClient, cfg: SluiceConfig, redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """docs/webhooks.md's example is examples/webhook_receiver.py, word for word, and
    it accepts what the notifier sends (and refuses a tampered body)."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    example = (root / "examples" / "webhook_receiver.py").read_text()
    assert f"```python\n{example}```" in (root / "docs" / "webhooks.md").read_text()
    monkeypatch.setenv("SLUICE_WEBHOOK_SECRET", SECRET)
    spec = importlib.util.spec_from_file_location(
        "webhook_receiver", root / "examples" / "webhook_receiver.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with receiving() as rx:
        job_id = submit(q, rx.url)
        run_one(q, result=[0.5])
        with notifier(cfg, redis_url):
            wait_until(lambda: rx.calls, what="delivery")
        event = mod.on_webhook(rx.calls[0].body, rx.calls[0].headers)
        assert event["data"]["id"] == job_id
        assert f"{job_id} [0.5]" in capsys.readouterr().out
        with pytest.raises(Exception, match="signature"):
            mod.on_webhook(rx.calls[0].body + b" ", rx.calls[0].headers)


def test_retries_stop_at_the_horizon_into_the_dead_letter_list(
    q: QueueClient, redis_url: str
) -> None:
    cfg = hook_config(retry_schedule_s=[0.3], horizon_s=1.0)
    ops = WebhookOps(["m", "n"])
    with receiving([500] * 100) as rx:
        job_id = submit(q, rx.url)
        run_one(q)
        with notifier(cfg, redis_url):
            wait_until(lambda: delivery(q, job_id).get("state") == "dead", what="dead")
        assert 2 <= len(rx.calls) <= 5  # attempts 0.3 s apart within about a second
    d = delivery(q, job_id)
    assert "horizon" in d["last_error"] and d["last_status"] == 500
    assert q.run(ops.dead("m")) == [job_id]
    # given up, the job is no longer held: back to its result_ttl_s (test_retention.py)
    assert 0 < q.redis.ttl(keys.job_key("m", job_id)) <= cfg.models["m"].queue.result_ttl_s


def test_retry_after_is_honoured(q: QueueClient, redis_url: str) -> None:
    cfg = hook_config(retry_schedule_s=[0.1])
    with receiving([503]) as rx:
        rx.retry_after = "1"
        job_id = submit(q, rx.url)
        run_one(q)
        with notifier(cfg, redis_url):
            wait_until(lambda: delivery(q, job_id).get("state") == "delivered", what="delivery")
        assert rx.calls[1].at - rx.calls[0].at >= 0.95  # the schedule alone said 0.1 s


def test_a_receiver_that_does_not_answer_in_time_is_retried(q: QueueClient, redis_url: str) -> None:
    cfg = hook_config(timeout_s=0.5, retry_schedule_s=[0.1])
    with receiving([-1]) as rx:  # holds the first call until released
        job_id = submit(q, rx.url)
        run_one(q)
        with notifier(cfg, redis_url):
            wait_until(lambda: delivery(q, job_id).get("attempts", 0) >= 1, what="an attempt")
            wait_until(lambda: len(rx.calls) >= 2, what="the retry")
            rx.release.set()
            wait_until(lambda: delivery(q, job_id).get("state") == "delivered", what="delivery")
    view = q.run(WebhookOps(["m", "n"]).view(job_id))
    assert view is not None and view.log[0]["error"] == "timed out"


def test_a_huge_answer_is_read_only_up_to_the_cap(q: QueueClient, redis_url: str) -> None:
    cfg = hook_config(max_response_bytes=1024)
    with receiving() as rx:
        rx.body_bytes = 8 * 1024 * 1024
        ids = [submit(q, rx.url) for _ in range(2)]
        batch = q.claim("m", "w1")
        q.complete("m", [Outcome.ok(j.id, 1) for j in batch.jobs], "w1")
        with notifier(cfg, redis_url):
            wait_until(
                lambda: all(delivery(q, j).get("state") == "delivered" for j in ids),
                what="both delivered",
            )
    assert all(delivery(q, j)["attempts"] == 1 for j in ids)


def test_deadline_expiry_and_reclaims_dead_letter_send_their_webhooks(redis_url: str) -> None:
    cfg = hook_config()
    models = {
        "m": cfg.models["m"].model_copy(
            update={
                "batching": cfg.models["m"].batching.model_copy(
                    update={"lease_s": 0.05, "max_attempts": 1}
                )
            }
        )
    }
    q = QueueClient(connect(redis_url), models)
    ops = WebhookOps(["m"])
    url = "http://127.0.0.1:9/hook"
    late = q.submit("m", [NewJob("a", "32", 1, deadline_ms=1, webhook=Webhook(url, ("expired",)))])[
        0
    ].id
    dl = q.get(late).deadline_at_ms or 0

    def redis_ms() -> int:
        s, us = q.redis.time()
        return int(s) * 1000 + int(us) // 1000

    wait_until(lambda: redis_ms() > dl, what="the deadline to pass (Redis clock)")
    assert q.claim("m", "w1").expired == 1
    lost = q.submit("m", [NewJob("b", "32", 1, webhook=Webhook(url, ("failed",)))])[0].id
    assert [j.id for j in q.claim("m", "w1").jobs] == [lost]  # then the worker dies
    wait_until(lambda: q.reclaim("m") >= 1, what="the lease to lapse")
    for job_id, event in ((late, "expired"), (lost, "failed")):
        v = q.run(ops.view(job_id))
        assert v is not None and (v.state, v.event, v.url) == ("pending", event, url)
    q.redis.close()
