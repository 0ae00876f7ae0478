"""Submits of one event-loop turn share one submit script call, and each request
gets the answer it would have got alone (gateway/submit_batch.py, ADR 0161).

The property: the same requests, coalesced on one fakeredis and sent one by one
in the same order on another, give every request the same outcome (its jobs and
created flags, or the same refusal with the same figures) and leave the same
queue, job, idempotency, owner and stats state behind.
"""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis
import fakeredis.aioredis
from hypothesis import given
from hypothesis import strategies as st

from gateway.redis_io import RedisGate
from gateway.submit_batch import ALONE_JOBS, MAX_JOBS, SubmitBatch
from sluice import keys
from sluice.errors import IdempotencyKeyReused, QueueFull, RateLimited, SluiceError
from sluice.jobs import NewJob, Owner, Submitted
from sluice.queue import AsyncQueueClient
from sluice.queue.pause import pause_call
from sluice.queue.scripts import script_source
from tests.conftest import budget, make_config

MODELS = dict(make_config().models)
OWNER = Owner("team", max_unfinished=5, rate_per_s=1e-6, burst=6)
VOLATILE = {"enq", "dl"}  # the clock: one instant coalesced, a later one each alone


def _job(i: int, key: str | None, body: str, cost: int) -> NewJob:
    return NewJob(
        input={"text": body},
        bucket="32",
        cost=cost,
        idempotency_key=key,
        id=keys.job_prefix("m", 0) + f"job{i}",  # the same ids on both sides
        request_hash=body if key else "",
    )


requests = st.lists(
    st.tuples(
        st.integers(1, 2),  # jobs in the request
        st.one_of(st.none(), st.sampled_from(["k1", "k2"])),  # Idempotency-Key
        st.sampled_from(["a", "b"]),  # the body (its hash guards a key's replays)
        st.integers(1, 3),  # cost of each job
    ),
    min_size=1,
    max_size=8,
)


def _build(spec: list[tuple[int, str | None, str, int]]) -> list[list[NewJob]]:
    out, n = [], 0
    for size, key, body, cost in spec:
        jobs = []
        for j in range(size):
            jobs.append(_job(n, f"{key}:{j}" if key and size > 1 else key, body, cost))
            n += 1
        out.append(jobs)
    return out


def _seen(outcome: list[Submitted] | BaseException) -> Any:
    if isinstance(outcome, QueueFull):
        return ("full", outcome.reason, outcome.queued, outcome.queued_cost)
    if isinstance(outcome, IdempotencyKeyReused):
        return ("reused", outcome.index)
    if isinstance(outcome, RateLimited):
        return ("limited",)  # its wait depends on the instant of the call
    if isinstance(outcome, BaseException):
        return type(outcome).__name__
    return [(s.id, s.created) for s in outcome]


async def _state(r: fakeredis.aioredis.FakeRedis) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in sorted(str(k) for k in await r.keys("*")):
        kind = str(await r.type(k))
        if kind == "hash" and k == keys.rate_limit_key("m"):  # "tokens:ms": the tokens
            out[k] = {o: str(v).split(":")[0] for o, v in (await r.hgetall(k)).items()}
        elif kind == "hash":
            h = await r.hgetall(k)
            out[k] = {f: v for f, v in h.items() if f not in VOLATILE}
        elif kind == "zset":
            out[k] = await r.zrange(k, 0, -1, withscores=True)
        elif kind == "string":
            out[k] = await r.get(k)
        elif kind == "list":
            out[k] = await r.llen(k)
    return out


class _Counting(fakeredis.aioredis.FakeRedis):
    scripts = 0

    async def evalsha(self, *a: Any, **kw: Any) -> Any:
        _Counting.scripts += 1
        return await super().evalsha(*a, **kw)


async def _prepare(r: fakeredis.aioredis.FakeRedis, paused: bool, earlier: bool) -> None:
    q = AsyncQueueClient(r, MODELS)
    await r.script_load(script_source("submit"))  # no NOSCRIPT retry in the count
    if earlier:  # a job already made under k1 with body "a" (a replay or a reuse)
        await q.submit("m", [_job(99, "k1", "a", 1)], owner=OWNER)
    if paused:
        await q.run(pause_call("m", by="test", refuse_submits=True, now_ms=0))


async def _both(spec: Any, max_jobs: int, paused: bool, earlier: bool) -> tuple[Any, ...]:
    reqs = _build(spec)
    alone_r = fakeredis.aioredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True)
    many_r = _Counting(server=fakeredis.FakeServer(), decode_responses=True)
    for r in (alone_r, many_r):
        await _prepare(r, paused, earlier)
    alone_q = AsyncQueueClient(alone_r, MODELS)
    alone: list[Any] = []
    for jobs in reqs:
        try:
            alone.append(await alone_q.submit("m", jobs, max_jobs=max_jobs, owner=OWNER))
        except SluiceError as e:
            alone.append(e)
    many_q = AsyncQueueClient(many_r, MODELS)
    batch = SubmitBatch(many_q.ops, lambda c: RedisGate(2.0, 8)(many_q.run(c)))
    _Counting.scripts = 0
    many = await asyncio.gather(
        *(batch.submit("m", jobs, max_jobs=max_jobs, owner=OWNER) for jobs in reqs),
        return_exceptions=True,
    )
    return alone, list(many), _Counting.scripts, await _state(alone_r), await _state(many_r)


# Each example runs two fakeredis servers' worth of scripts: a share of the budget.
@budget(0.3)
@given(spec=requests, max_jobs=st.integers(0, 6), paused=st.booleans(), earlier=st.booleans())
def test_coalesced_submits_answer_each_request_as_alone(
    spec: Any, max_jobs: int, paused: bool, earlier: bool
) -> None:
    alone, many, scripts, alone_state, many_state = asyncio.run(
        _both(spec, max_jobs, paused, earlier)
    )
    assert [_seen(o) for o in many] == [_seen(o) for o in alone]
    assert scripts == 1  # every request of the turn in one script call
    assert many_state == alone_state


def test_over_the_job_cap_more_calls_and_a_large_request_alone() -> None:
    async def go() -> tuple[int, list[Any]]:
        r = _Counting(server=fakeredis.FakeServer(), decode_responses=True)
        q = AsyncQueueClient(r, MODELS)
        await r.script_load(script_source("submit"))
        batch = SubmitBatch(q.ops, q.run)
        reqs = [[_job(i, None, "a", 1)] for i in range(MAX_JOBS + 1)]
        big = [_job(MAX_JOBS + 1 + i, None, "a", 1) for i in range(ALONE_JOBS + 1)]
        _Counting.scripts = 0
        got = await asyncio.gather(*(batch.submit("m", jobs) for jobs in [*reqs, big]))
        return _Counting.scripts, got

    scripts, got = asyncio.run(go())
    assert scripts == 3  # MAX_JOBS one-job requests, then the last one, then the big one
    assert [len(s) for s in got] == [1] * (MAX_JOBS + 1) + [ALONE_JOBS + 1]
    assert all(s.created for sub in got for s in sub)
