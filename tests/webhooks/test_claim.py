"""The delivery claim on a real Redis: it leases per host, deferring the deliveries
of hosts this notifier has full, so one slow receiver's backlog never holds up
another's deliveries (issue 28 item 7), and a claim's Redis work stays bounded
however long that backlog (docs/adr/0139)."""

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
from sluice.webhooks.ops import CLAIM, DEFER_BAND, MARK_BAND, HostLoad, WebhookOps
from sluice.webhooks.ops import scripts as webhook_scripts
from tests.unit.test_signatures import _disagreements
from tests.waits import redis_now_ms, wait_until
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


def queued(q: QueueClient, url: str, n: int, due_ms: float, tag: str) -> list[str]:
    """``n`` pending deliveries to ``url`` due at ``due_ms`` (+1 ms each), written
    straight to Redis in one pipeline (a backlog of thousands in a blink), and a wake
    token for an idle notifier."""
    ids = [f"{tag}.{i:06d}" for i in range(n)]
    p = q.redis.pipeline(transaction=False)
    for i, d in enumerate(ids):
        fields = {"kind": "job", "event": "succeeded", "url": url, "state": "pending"}
        p.hset(keys.delivery_key("m", d), mapping=fields | {"ended": int(due_ms)})
        p.zadd(keys.deliveries_due_key("m"), {d: due_ms + i})
    p.rpush(keys.deliveries_wake_key("m"), "1")
    p.execute()
    return ids


def hmget_calls(q: QueueClient) -> int:
    """HMGETs Redis has run so far (scripts' included): a claim reads each delivery it
    looks at with one."""
    stats = q.redis.info("commandstats")
    return int(stats.get("cmdstat_hmget", {}).get("calls", 0))


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


def test_a_full_hosts_deliveries_are_deferred_paced_and_still_count_as_due(
    q: QueueClient,
) -> None:
    slow, fast = "http://127.0.0.2:9/hook", "http://127.0.0.1:9/hook"
    ids = ended(q, [slow] * 6 + [fast])
    due = keys.deliveries_due_key("m")
    # this notifier holds 2 attempts there (its cap), each taking about 1 s
    full = {"127.0.0.2": HostLoad(busy=2, pace_ms=1000)}
    first = q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=2, hosts=full, scan=4))
    assert first.claimed == [] and first.more  # 4 looked at, all deferred; more to see
    # the next call starts at the head again: what the first looked at has left it
    after = {"127.0.0.2": HostLoad(2, 1000, first.horizons["127.0.0.2"])}
    second = q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=2, hosts=after, scan=4))
    assert [c.id for c in second.claimed] == [ids[6]] and not second.more
    assert q.redis.zrangebyscore(due, "-inf", second.now_ms) == []
    # paced: the k-th is looked at again after ceil(k / 2) attempts there, each call
    # going on from the last one's latest (first.now + 2 s: 4 deferred, 2 a second)
    t0, t1 = first.now_ms, second.now_ms
    back = {d: int(q.redis.zscore(due, d) - DEFER_BAND) for d in ids[:6]}
    assert [back[d] for d in ids[:4]] == [t0 + 1000, t0 + 1000, t0 + 2000, t0 + 2000]
    assert [back[d] for d in ids[4:6]] == [max(t1, t0 + 2000) + 1000] * 2
    assert second.horizons == {"127.0.0.2": max(t1, t0 + 2000) + 1000}
    # never attempted, the record untouched (no next_attempt_at), and each marks when
    # it fell due: the backlog's oldest is still the first one's true age
    assert all(q.redis.hmget(keys.delivery_key("m", j), "att", "next") == [None, None]
               for j in ids[:6])  # fmt: skip
    assert {m: int(s) - MARK_BAND for m, s in q.redis.zrangebyscore(due, MARK_BAND, "+inf",
            withscores=True)} == {f"~{j}": 1_000 + i for i, j in enumerate(ids[:6])}  # fmt: skip
    b = q.run(OPS.backlog("m", t1))
    assert (b.pending, b.due, b.oldest_due_s) == (7, 6, (t1 - 1_000) / 1000)


def test_a_deferred_delivery_comes_back_and_leaves_no_mark(q: QueueClient) -> None:
    slow = "http://127.0.0.2:9/hook"
    ids = ended(q, [slow] * 3)
    due = keys.deliveries_due_key("m")
    full = {"127.0.0.2": HostLoad(busy=1, pace_ms=1)}
    q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=1, hosts=full, defer_ms=1))
    assert q.redis.zcount(due, DEFER_BAND, f"({MARK_BAND}") == 3
    # a slot is free and 1 ms has passed: one comes back, at most per_host of it
    got = wait_until(
        lambda: q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=1)).claimed,
        what="a deferred delivery back",
    )
    assert len(got) == 1 and got[0].id in ids and got[0].attempt == 1
    assert q.redis.zscore(due, f"~{got[0].id}") is None  # its mark went with the lease
    assert q.redis.zcount(due, MARK_BAND, "+inf") == 2  # the others' stay
    # one redelivered meanwhile is due now again: its stale mark goes once it is oldest
    other = next(j for j in ids if j != got[0].id)
    q.redis.zadd(due, {other: 500})  # as redeliver.lua would (due again, outside the band)
    q.redis.zadd(due, {f"~{other}": MARK_BAND + 1})  # and make its mark the oldest
    q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=1, hosts=full, defer_ms=60_000))
    assert q.redis.zscore(due, f"~{other}") == MARK_BAND + 500  # deferred afresh from 500


def test_a_claim_reaching_a_fast_host_reads_no_more_than_a_few_entries_behind_a_backlog(
    q: QueueClient, redis_url: str
) -> None:
    """2,000 deliveries to a hung host due ahead: once a notifier has looked at them,
    each delivery to another host costs a few HMGETs, not one per backlog entry."""
    cfg: SluiceConfig = hook_config(
        max_concurrency=4, per_host_connections=2, allow_networks=["127.0.0.0/8"], timeout_s=10.0
    )
    with receiving([-1] * 2, host="127.0.0.2") as slow, receiving() as fast:
        backlog = queued(q, slow.url, 2_000, redis_now_ms(q.redis) - 10_000, "hung")
        start = hmget_calls(q)
        with notifier(cfg, redis_url):
            try:
                wait_until(lambda: len(slow.calls) == 2, what="the hung host's 2 attempts")
                wait_until(lambda: hmget_calls(q) - start >= len(backlog), what="a first look")
                costs = []
                for i in range(3):
                    before = hmget_calls(q)
                    queued(q, fast.url, 1, redis_now_ms(q.redis), f"fast{i}")
                    wait_until(lambda i=i: len(fast.calls) == i + 1, what="the fast delivery")
                    costs.append(hmget_calls(q) - before)
                # the fast one's read and lease, a deferred one or two coming back: a few
                assert max(costs) <= 32, costs
                assert len(slow.calls) == 2  # the hung host still held at its cap
            finally:
                slow.release.set()  # its attempts end: the notifier stops at once


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
            wait_until(lambda: len(slow.calls) == 2, what="the slow host's 2 attempts")
            assert [log(j) for j in held] == [[]] * 6
            slow.release.set()
            wait_until(lambda: all(len(log(j)) == 1 for j in held), what="the backlog delivered")
        assert [e["status"] for j in held for e in log(j)] == [200] * 6
        assert len(slow.calls) == 6  # one request per recorded attempt
