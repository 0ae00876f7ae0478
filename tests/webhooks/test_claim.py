"""The delivery claim on a real Redis: it leases per host, skipping the hosts this
notifier has full, so one slow receiver's backlog never holds up another's
deliveries (issue 28 item 7), and it walks the whole due range in bounded steps."""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources

import pytest

from sluice import keys
from sluice.config import SluiceConfig
from sluice.jobs import NewJob, Outcome, Webhook
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.webhooks.guard import parse_url
from sluice.webhooks.ops import CLAIM, WebhookOps
from sluice.webhooks.ops import scripts as webhook_scripts
from tests.unit.test_signatures import _disagreements
from tests.waits import wait_until
from tests.webhooks.conftest import hook_config, notifier
from tests.webhooks.receiver import receiving

OPS = WebhookOps(["m", "n"])


@pytest.fixture
def q(redis_url: str) -> Iterator[QueueClient]:
    client = QueueClient(connect(redis_url), dict(hook_config().models))
    client.register(webhook_scripts())
    yield client
    client.redis.close()


def ended(q: QueueClient, urls: list[str]) -> list[str]:
    """A delivery per URL, due in this order (1 ms apart, long ago)."""
    ids = [q.submit("m", [NewJob("x", "32", 1, webhook=Webhook(u))])[0].id for u in urls]
    done: list[str] = []
    while len(done) < len(ids):
        batch = q.claim("m", "w1")
        q.complete("m", [Outcome.ok(j.id, 1) for j in batch.jobs], "w1")
        done += [j.id for j in batch.jobs]
    for i, job_id in enumerate(ids):
        q.redis.zadd(keys.deliveries_due_key("m"), {job_id: 1_000 + i})
    return ids


def test_the_claim_script_reads_its_arguments_by_name() -> None:
    text = (resources.files("sluice.webhooks") / "lua" / "claim.lua").read_text()
    body = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    assert _disagreements(CLAIM, body) == []


@pytest.mark.parametrize(
    "url",
    [
        "https://Example.COM:8443/hook?x=1",
        "https://example.com./a",
        "http://[::1]:8080/hook",
        "https://127.0.0.2/",
        "https://hooks.example.com#frag",
    ],
)
def test_the_host_a_claim_counts_is_the_host_the_guard_parses(q: QueueClient, url: str) -> None:
    ended(q, [url])
    (c,) = q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=1)).claimed
    assert c.host == parse_url(url, True).host


def test_a_full_host_is_skipped_and_the_scan_walks_past_its_backlog(q: QueueClient) -> None:
    slow, fast = "http://127.0.0.2:9/hook", "http://127.0.0.1:9/hook"
    ids = ended(q, [slow] * 6 + [fast])
    full = {"127.0.0.2": 2}  # this notifier holds 2 attempts there: its cap
    first = q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=2, busy=full, scan=4))
    assert first.claimed == [] and first.next_offset == 4  # 4 looked at, all skipped
    second = q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=2, busy=full, scan=4, offset=4))
    assert [c.id for c in second.claimed] == [ids[6]] and second.next_offset == 0
    # nothing skipped was touched: still due, never attempted
    due = q.redis.zrangebyscore(keys.deliveries_due_key("m"), "-inf", 10_000)
    assert due == ids[:6]
    assert all(q.redis.hget(keys.delivery_key("m", j), "att") is None for j in ids[:6])
    # with no attempts in flight, one call takes at most per_host of the host
    third = q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=2))
    assert [c.id for c in third.claimed] == ids[:2]
    assert {c.host for c in third.claimed} == {"127.0.0.2"}


def test_a_hanging_receiver_with_a_backlog_ahead_does_not_delay_another_host(
    q: QueueClient, redis_url: str
) -> None:
    cfg: SluiceConfig = hook_config(
        max_concurrency=4,
        per_host_connections=2,
        allow_networks=["127.0.0.0/8"],
        timeout_s=10.0,
    )
    with receiving([-1] * 6, host="127.0.0.2") as slow, receiving() as fast:
        held = ended(q, [slow.url] * 6)
        quick = ended(q, [fast.url])[0]
        q.redis.zadd(keys.deliveries_due_key("m"), {quick: 2_000})  # behind the backlog

        def log(job_id: str) -> list[dict[str, object]]:
            v = q.run(OPS.view(job_id))
            return v.log if v is not None else []

        with notifier(cfg, redis_url):
            wait_until(lambda: len(fast.calls) == 1, what="the fast host's delivery")
            wait_until(lambda: log(quick), what="its attempt recorded")
            # meanwhile the slow host holds its 2 (its cap); no other of its
            # deliveries has an attempt recorded (none timed out waiting for a slot)
            assert len(slow.calls) == 2
            assert [log(j) for j in held] == [[]] * 6
            slow.release.set()
            wait_until(lambda: all(len(log(j)) == 1 for j in held), what="the backlog delivered")
        assert [e["status"] for j in held for e in log(j)] == [200] * 6
        assert len(slow.calls) == 6  # one request per recorded attempt
