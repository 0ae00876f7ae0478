"""Issue 30, section 2: priorities, deadlines, webhooks and the time to first token
work for generative jobs as for others, through the slot loop (a FakeEngine) on a
real Redis.

Deadlines: ``deadline_ms`` bounds the wait for a start (docs/api.md: "expires the
job if no worker has started it by then"), for generative jobs as for others. A
job past its deadline in the queue ends ``expired`` at the next claim and its
stream's follower ends with an error; a job whose deadline passes while it runs
runs to its end: its result is stored and its slot freed.
"""

from __future__ import annotations

import asyncio
import base64
import http.server
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from notifier.loop import build
from sluice import keys
from sluice.config import SluiceConfig
from sluice.generate.ops import StepReply, run_step
from sluice.generate.params import GenerateInput, SamplingParams
from sluice.generate.stream import Follower, entry_from_record, parse_entry
from sluice.jobs import JobStatus, NewJob, Webhook
from sluice.records import DeliveryField, JobField
from tests.waits import redis_now_ms, wait_until

pytestmark = pytest.mark.redis
MODEL = "gen"


def new_job(prompt: Sequence[int], max_tokens: int, **kw: Any) -> NewJob:
    value = GenerateInput(tuple(prompt), SamplingParams(max_tokens, temperature=0.0)).to_dict()
    return NewJob(value, "256", len(prompt) + max_tokens, **kw)


def submit(g: Any, prompt: Sequence[int], max_tokens: int, **kw: Any) -> str:
    return str(g.qc.submit(MODEL, [new_job(prompt, max_tokens, **kw)])[0].id)


def past_deadline(g: Any, job_id: str) -> None:
    """Wait (on the Redis clock, what deadlines are measured by) until it passed."""
    dl = int(g.qc.redis.hget(keys.job_key(MODEL, job_id), JobField.DL))
    assert dl > 0
    wait_until(lambda: redis_now_ms(g.qc.redis) > dl, what="the deadline to pass")


def recording() -> tuple[list[list[str]], Callable[..., StepReply]]:
    """A step function that records each claim's job ids, in claim order."""
    claims: list[list[str]] = []

    def step(*args: Any, **kw: Any) -> StepReply:
        reply = run_step(*args, **kw)
        if reply.batch.jobs:
            claims.append([j.id for j in reply.batch.jobs])
        return reply

    return claims, step


def follow(g: Any, job_id: str) -> Follower:
    """A follower fed the job's whole stream, then the record's ending if the stream
    has none (what a client does after reading a stream that ended without one)."""
    follower = Follower()
    for entry_id, fields in g.qc.redis.xrange(keys.stream_key(MODEL, job_id)):
        follower.feed(parse_entry(entry_id, fields))
    if not follower.done:
        ending = entry_from_record(g.qc.get(job_id, MODEL))
        if ending is not None:
            follower.feed(ending)
    return follower


# -- Priorities ----------------------------------------------------------------------
def test_free_slots_take_high_before_normal_before_low(gen: Callable[..., Any]) -> None:
    claims, step = recording()
    g = gen(slots=2, step=step)
    by_prio: dict[str, list[str]] = {}
    for prio in ("low", "normal", "high", "low", "normal", "high"):  # low first in time
        by_prio.setdefault(prio, []).append(submit(g, [len(by_prio), 5], 2, priority=prio))
    g.until_idle()
    order = [job_id for claim in claims for job_id in claim]
    assert order == by_prio["high"] + by_prio["normal"] + by_prio["low"]
    assert claims[0] == by_prio["high"]  # two free slots: both highs in one claim
    for job_id in order:
        assert g.qc.get(job_id, MODEL).status is JobStatus.SUCCEEDED


def test_a_slot_freed_mid_run_goes_to_a_high_job_queued_after_low_ones(
    gen: Callable[..., Any],
) -> None:
    claims, step = recording()
    g = gen(slots=1, step=step)
    first = submit(g, [1, 2], 3)
    assert g.loop.turn().claimed == 1  # the only slot is busy
    lows = [submit(g, [3, i], 2, priority="low") for i in range(2)]
    high = submit(g, [4], 2, priority="high")
    g.until_idle()
    assert [c[0] for c in claims] == [first, high, *lows]


# -- Deadlines -----------------------------------------------------------------------
def test_a_job_past_its_deadline_in_the_queue_expires_and_its_follower_ends(
    gen: Callable[..., Any],
) -> None:
    g = gen(slots=2)
    job_id = submit(g, [1, 2, 3], 4, deadline_ms=50)
    past_deadline(g, job_id)
    assert g.until_idle() == 1  # claimed nothing: the claim expired it
    rec = g.qc.get(job_id, MODEL)
    assert rec.status is JobStatus.EXPIRED and rec.attempts == 0
    assert g.engine.steps == 0 and not g.engine.seqs
    follower = follow(g, job_id)
    assert follower.done and follower.result is None
    assert follower.error is not None and "expired" in follower.error
    assert follower.text == ""


def test_a_job_that_expires_behind_full_slots_never_runs(gen: Callable[..., Any]) -> None:
    g = gen(slots=1)
    busy = submit(g, [1, 2], 8)
    assert g.loop.turn().claimed == 1
    late = submit(g, [5, 6], 4, deadline_ms=50)
    past_deadline(g, late)
    g.until_idle()  # the slot frees, the next claim expires the late job
    assert g.qc.get(busy, MODEL).status is JobStatus.SUCCEEDED
    assert g.qc.get(late, MODEL).status is JobStatus.EXPIRED
    assert g.entries(late) == []  # it never ran: nothing streamed
    follower = follow(g, late)
    assert follower.done and follower.error is not None


def test_a_job_whose_deadline_passes_while_it_runs_is_stopped_and_expires(
    gen: Callable[..., Any],
) -> None:
    # ADR 0154: the next step ends it (expired), its stream says so, its slot frees.
    g = gen(slots=2)
    job_id = submit(g, [7, 8], 6, deadline_ms=2_000)
    assert g.loop.turn().claimed == 1
    g.loop.turn()  # a token streamed, then the deadline passes mid-run
    past_deadline(g, job_id)
    g.until_idle()
    rec = g.qc.get(job_id, MODEL)
    assert rec.status is JobStatus.EXPIRED and rec.result is None
    assert g.loop.active == 0 and not g.engine.seqs  # the slot is free
    follower = follow(g, job_id)
    assert follower.done and follower.result is None
    assert follower.error is not None and "expired" in follower.error
    after = submit(g, [9], 2)  # and it takes the next job
    g.until_idle()
    assert g.qc.get(after, MODEL).status is JobStatus.SUCCEEDED


def test_a_job_past_its_deadline_whose_worker_died_expires_and_frees_the_old_slot(
    gen: Callable[..., Any],
) -> None:
    dead, other = gen(slots=2, lease_s=0.3), gen(slots=2, lease_s=0.3)
    job_id = submit(dead, [2, 3], 8, deadline_ms=1_000)
    assert dead.loop.turn().claimed == 1
    dead.loop.turn()  # a token streamed; then this worker stalls (its lease runs out)
    assert dead.entries(job_id)
    past_deadline(dead, job_id)
    lease = dead.qc.redis.zscore(keys.inflight_key(MODEL), job_id)
    wait_until(lambda: redis_now_ms(dead.qc.redis) > lease, what="the lease to lapse")
    assert other.loop.turn().claimed == 0  # reclaimed, then expired: never run again
    assert dead.qc.get(job_id, MODEL).status is JobStatus.EXPIRED
    assert dead.loop.turn().lost == 1  # the stalled worker learns and frees its slot
    assert dead.loop.active == 0 and not dead.engine.seqs
    follower = follow(dead, job_id)
    assert follower.done and follower.error is not None and follower.result is None


# -- Webhooks ------------------------------------------------------------------------
def test_a_generative_job_with_a_webhook_gets_its_completion_delivery(
    gen: Callable[..., Any],
) -> None:
    g = gen(slots=2)
    url = "https://hooks.example.com/done"
    job_id = submit(g, [1, 2], 3, webhook=Webhook(url))
    plain = submit(g, [3, 4], 3)
    g.until_idle()
    delivery = g.qc.redis.hgetall(keys.delivery_key(MODEL, job_id))
    assert delivery[DeliveryField.URL] == url
    assert delivery[DeliveryField.EVENT] == "succeeded"
    assert delivery[DeliveryField.STATE] == "pending"
    assert g.qc.redis.zscore(keys.deliveries_due_key(MODEL), job_id) is not None
    rec = g.qc.get(job_id, MODEL)  # what the delivery's body carries (JobRecord.view)
    assert rec.view()["result"]["text"] == g.expected([1, 2], 3)
    assert rec.view()["webhook"]["url"] == url
    assert not g.qc.redis.exists(keys.delivery_key(MODEL, plain))


SECRET_ENV = "SLUICE_G8_WEBHOOK_SECRET"
SECRET = "whsec_" + base64.b64encode(b"sluice-g8-test-secret-0123456789").decode()
HOOKS = {
    "secret_env": SECRET_ENV,
    "allow_networks": ["127.0.0.1/32"],
    "allow_http": True,
    "retry_schedule_s": [0.2],
    "jitter": 0.0,
}


@contextmanager
def receiver() -> Iterator[tuple[str, list[bytes]]]:
    """A loopback HTTP receiver answering 200: its URL and the bodies it got."""
    bodies: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            bodies.append(self.rfile.read(int(self.headers.get("content-length") or 0)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", bodies
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@contextmanager
def notifier_running(cfg: SluiceConfig, redis_url: str) -> Iterator[None]:
    """The webhook notifier's loop in a thread of its own until the block ends."""
    n = build(cfg, redis_url, {SECRET_ENV: SECRET})
    stop = threading.Event()

    async def main() -> None:
        try:
            await n.run(stop.is_set)
        finally:
            await n.client.redis.aclose()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
        assert not thread.is_alive(), "the notifier did not stop"


def test_the_notifier_delivers_a_generative_jobs_result_to_its_webhook(
    gen: Callable[..., Any], redis_url: str
) -> None:
    g = gen(slots=2, sections={"webhooks": HOOKS})
    with receiver() as (url, bodies), notifier_running(g.cfg, redis_url):
        job_id = submit(g, [1, 2], 3, webhook=Webhook(url))
        g.until_idle()
        wait_until(lambda: bodies, what="the webhook's delivery")
        wait_until(
            lambda: (
                g.qc.redis.hget(keys.delivery_key(MODEL, job_id), DeliveryField.STATE)
                == "delivered"
            ),
            what="the delivery to be marked delivered",
        )
    body = json.loads(bodies[0])
    job = body["data"]  # docs/webhooks.md: {"type", "timestamp", "data": the job view}
    assert job["id"] == job_id and job["status"] == "succeeded"
    assert job["result"]["text"] == g.expected([1, 2], 3)
    assert job["result"]["finish_reason"] == "length"


# -- The time to first token ---------------------------------------------------------
def test_the_job_view_carries_the_time_to_first_token(gen: Callable[..., Any]) -> None:
    g = gen(slots=2)
    job_id = submit(g, [1, 2], 3)
    assert g.loop.turn().claimed == 1
    assert "ttft_ms" not in g.qc.get(job_id, MODEL).view()["timings"]  # no token yet
    g.until_idle()
    timings = g.qc.get(job_id, MODEL).view()["timings"]
    stored = int(g.qc.redis.hget(keys.job_key(MODEL, job_id), JobField.TTFT))
    assert timings["ttft_ms"] == stored >= 0
    assert timings["ttft_ms"] <= (timings["finished_at"] - timings["queued_at"]) * 1000 + 1
