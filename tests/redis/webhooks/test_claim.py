"""The delivery claim on a real Redis: it leases per host, moving the deliveries of
hosts this notifier has full into their hosts' lanes, so one slow receiver's backlog never holds up
another's deliveries (issue 28 item 7), and a claim's Redis work stays bounded
however long that backlog (docs/adr/0139)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from importlib import resources

import pytest

from notifier.loop import IDLE_WAIT_S
from sluice import keys
from sluice.config import SluiceConfig
from sluice.jobs import NewJob, Outcome, Webhook
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.webhooks.guard import parse_url
from sluice.webhooks.ops import CLAIM, WebhookOps
from sluice.webhooks.ops import scripts as webhook_scripts
from tests.kit.receiver import receiving
from tests.kit.signatures import disagreements
from tests.kit.webhooks import hook_config, notifier
from tests.waits import redis_now_ms, wait_until

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
    assert disagreements(CLAIM, body) == []


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


def lane(q: QueueClient, host: str) -> dict[str, float]:
    return dict(q.redis.zrange(keys.deliveries_lane_prefix("m") + host, 0, -1, withscores=True))


def test_a_full_hosts_deliveries_go_into_its_lane_and_still_count_as_due(
    q: QueueClient,
) -> None:
    slow, fast = "http://127.0.0.2:9/hook", "http://127.0.0.1:9/hook"
    ids = ended(q, [slow] * 6 + [fast])
    due = keys.deliveries_due_key("m")
    full = {"127.0.0.2": 2}  # this notifier holds 2 attempts there: its cap
    first = q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=2, busy=full, scan=4))
    assert first.claimed == [] and first.more and first.laned  # 4 looked at, all moved
    second = q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=2, busy=full, scan=4))
    assert [c.id for c in second.claimed] == [ids[6]] and not second.more
    # out of the due zset (no claim reads them again), into the host's lane with
    # their due times; the lanes zset holds the host by its earliest
    assert q.redis.zrangebyscore(due, "-inf", second.now_ms) == []
    assert lane(q, "127.0.0.2") == {j: 1_000 + i for i, j in enumerate(ids[:6])}
    assert q.redis.zrange(keys.deliveries_lanes_key("m"), 0, -1, withscores=True) == [
        ("127.0.0.2", 1_000)
    ]
    # never attempted, the record untouched (no next_attempt_at)
    assert all(q.redis.hmget(keys.delivery_key("m", j), "att", "next") == [None, None]
               for j in ids[:6])  # fmt: skip
    # pending and due count them, and the oldest due is the first one's true age
    t = second.now_ms
    b = q.run(OPS.backlog("m", t))
    assert (b.pending, b.due, b.oldest_due_s) == (7, 6, (t - 1_000) / 1000)
    # a full host's lane is skipped unread: nothing leased, nothing read
    before = hmget_calls(q)
    third = q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=2, busy=full, scan=4))
    assert third.claimed == [] and hmget_calls(q) == before and third.laned


def test_a_freed_slot_is_filled_from_the_lane_by_the_next_claim(q: QueueClient) -> None:
    slow = "http://127.0.0.2:9/hook"
    ids = ended(q, [slow] * 4)
    full = {"127.0.0.2": 1}
    q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=1, busy=full))
    assert list(lane(q, "127.0.0.2")) == ids
    # its attempt ended: a slot is free, and the very next claim leases from the lane,
    # in due order, at most the free slot's worth
    got = q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=1, busy={}))
    assert [(c.id, c.attempt, c.host) for c in got.claimed] == [(ids[0], 1, "127.0.0.2")]
    assert list(lane(q, "127.0.0.2")) == ids[1:] and got.laned
    # leased as the due path leases: due again at the end of its lease, and pending
    # counts it once
    lapse = q.redis.zscore(keys.deliveries_due_key("m"), ids[0])
    assert lapse == got.now_ms + 60_000
    assert q.run(OPS.backlog("m", got.now_ms)).pending == 4
    assert q.redis.zscore(keys.deliveries_lanes_key("m"), "127.0.0.2") == 1_001
    # two slots free: two from the lane; then the last, and the lane is gone
    two = q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=3, busy={"127.0.0.2": 1}))
    assert [c.id for c in two.claimed] == ids[1:3]
    last = q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=1))
    assert [c.id for c in last.claimed] == [ids[3]] and not last.laned
    assert q.redis.exists(
        keys.deliveries_lanes_key("m"), keys.deliveries_lane_sizes_key("m")
    ) == 0  # fmt: skip


def test_a_delivery_redelivered_while_in_a_lane_is_sent_once(q: QueueClient) -> None:
    slow = "http://127.0.0.2:9/hook"
    ids = ended(q, [slow] * 2)
    q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=1, busy={"127.0.0.2": 1}))
    assert list(lane(q, "127.0.0.2")) == ids
    q.run(OPS.redeliver(ids[0], 3600))  # an admin: now due in the due zset too
    # a slot frees: one claim sees it in the lane and in the due zset; one lease
    one = q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=1))
    assert [c.id for c in one.claimed] == [ids[0]]
    # the slot is full again (that lease): the other stays in the lane, the
    # redelivered one's lane entry is gone
    none = q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=1, busy={"127.0.0.2": 1}))
    assert none.claimed == [] and list(lane(q, "127.0.0.2")) == [ids[1]]
    assert q.run(OPS.backlog("m", none.now_ms)).pending == 2
    # a lane entry met while its delivery has a due entry (redelivered; here not due
    # yet) is dropped: the due entry decides
    q.run(OPS.redeliver(ids[1], 3600))
    q.redis.zadd(keys.deliveries_due_key("m"), {ids[1]: none.now_ms + 60_000})
    both = q.run(OPS.claim_batch("m", "n1", 60_000, 10, per_host=1))
    assert both.claimed == [] and lane(q, "127.0.0.2") == {}
    assert q.redis.hget(keys.delivery_key("m", ids[1]), "att") is None


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
                # the fast one's read and lease; the hung host's lane is skipped unread
                assert max(costs) <= 4, costs
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


def test_a_burst_to_one_host_is_leased_as_its_slots_free(q: QueueClient, redis_url: str) -> None:
    """300 deliveries to one fast receiver with 2 slots: each claim after the first
    look refills freed slots from the host's lane, so all are delivered and the
    notifier claims about once per slot freed, no deferral between."""
    n = 300
    cfg: SluiceConfig = hook_config(
        max_concurrency=8, per_host_connections=2, allow_networks=["127.0.0.0/8"]
    )
    with receiving() as fast:
        ids = queued(q, fast.url, n, redis_now_ms(q.redis) - 1_000, "burst")
        started = time.monotonic()
        with notifier(cfg, redis_url) as nt:
            wait_until(lambda: len(fast.calls) == n, what="the burst delivered", timeout_s=60)
            wait_until(
                lambda: q.run(OPS.backlog("m", redis_now_ms(q.redis))).pending == 0,
                what="every attempt recorded",
            )
            claims = nt.claims["m"]
        elapsed_s = time.monotonic() - started
    states = {q.redis.hget(keys.delivery_key("m", j), "state") for j in ids}
    assert states == {"delivered"}
    # the first look moves the burst into the lane (n / 256 claims, leasing 2), then
    # one claim per slot freed at most (fewer when both free before a claim runs); no
    # claim runs that the lane's free slot did not call for (a claim finding nothing
    # only on the idle tick, once per IDLE_WAIT_S however long a loaded machine takes
    # over the burst, or after a wake token)
    assert claims <= n + 8 + elapsed_s / IDLE_WAIT_S, (claims, elapsed_s)
