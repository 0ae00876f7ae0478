"""Issue 30, section 2: API keys, idempotency, deadlines, the dashboard and the
job view work for generative jobs as for others, through the gateway's generative
routes (/v1/completions, /v1/chat/completions, /v1/jobs/{id}/stream) on fakeredis."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from sluice import keys, registry
from sluice.apikeys import hash_key
from sluice.records import JobField
from tests.factories import worker_info
from tests.waits import async_wait_until

pytestmark = pytest.mark.asyncio(loop_scope="function")

ALICE, BOB = "sk_alice-0123456789abcdef", "sk_bob-0123456789abcdef"
COMPLETION = {"model": "g", "prompt": "hey", "max_tokens": 4, "temperature": 0}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def auth(**alice: Any) -> dict[str, Any]:
    """Keys alice (with ``alice``'s limits) and bob."""
    return {
        "keys": [
            {"name": "alice", "hash": hash_key(ALICE), **alice},
            {"name": "bob", "hash": hash_key(BOB)},
        ]
    }


def events(body: str) -> list[dict[str, Any]]:
    """SSE events as {id, event, data} (comments and retry lines dropped)."""
    out = []
    for block in body.split("\n\n"):
        ev: dict[str, Any] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            if name in ("id", "event"):
                ev[name] = value
            elif name == "data":
                ev["data"] = json.loads(value)
        if "event" in ev:
            out.append(ev)
    return out


async def ready_worker(gen: Any) -> None:
    """A ready worker of ``g`` (its heartbeat), so admission expects no cold start."""
    info = worker_info(id="w1", model="g", buckets=["16", "32", "64"], heartbeat_at=time.time())
    for cmd in registry.heartbeat(info, 60.0):
        await gen.redis.execute_command(*cmd)


async def submit_with_deadline(gen: Any, deadline_ms: int) -> str:
    """A job with a deadline, once the gateway has seen the ready worker."""
    await ready_worker(gen)

    async def accepted() -> Any:
        resp = await submit_job(gen, deadline_ms=deadline_ms)
        assert resp.status_code in (202, 429), resp.text
        return resp.json()["id"] if resp.status_code == 202 else None

    return str(await async_wait_until(accepted, what="the gateway to see the worker"))


async def submit_job(gen: Any, headers: dict[str, str] | None = None, **extra: Any) -> Any:
    body = {"input": {"prompt": "hey", "max_tokens": 4, "temperature": 0}, **extra}
    return await gen.client.post("/v1/models/g/jobs", json=body, headers=headers or {})


# -- API keys ------------------------------------------------------------------------
async def test_the_generative_routes_need_a_key(make_gen: Any) -> None:
    async with make_gen(auth()) as gen:
        chat = {"model": "g", "messages": [{"role": "user", "content": "hi"}]}
        for path, body in [("/v1/completions", COMPLETION), ("/v1/chat/completions", chat)]:
            for headers in ({}, bearer("sk_wrong-0123456789")):
                resp = await gen.client.post(path, json=body, headers=headers)
                assert resp.status_code == 401, (path, headers, resp.text)
                assert resp.headers["www-authenticate"].startswith("Bearer")
        job_id = (await submit_job(gen, bearer(ALICE))).json()["id"]
        resp = await gen.client.get(f"/v1/jobs/{job_id}/stream")
        assert resp.status_code == 401
        assert (await gen.queue.stats("g")).counters.get("arrived", 0) == 1  # only alice's


async def test_a_key_cannot_read_another_keys_stream_but_its_own(make_gen: Any) -> None:
    async with make_gen(auth()) as gen:
        job_id = (await submit_job(gen, bearer(ALICE))).json()["id"]
        unknown = job_id[:-4] + "0000"
        theirs = await gen.client.get(f"/v1/jobs/{job_id}/stream", headers=bearer(BOB))
        none = await gen.client.get(f"/v1/jobs/{unknown}/stream", headers=bearer(BOB))
        assert theirs.status_code == none.status_code == 404
        assert theirs.json()["error"]["type"] == none.json()["error"]["type"]
        worker = asyncio.create_task(gen.serve(["o", "k"]))
        mine = await gen.client.get(f"/v1/jobs/{job_id}/stream", headers=bearer(ALICE))
        await worker
        assert mine.status_code == 200
        assert [e["event"] for e in events(mine.text)][-1] == "end"


async def test_a_completion_under_a_key_is_that_keys_job(make_gen: Any) -> None:
    async with make_gen(auth()) as gen:
        worker = asyncio.create_task(gen.serve(["o", "k"]))
        resp = await gen.client.post("/v1/completions", json=COMPLETION, headers=bearer(ALICE))
        await worker
        assert resp.status_code == 200, resp.text
        job_id = resp.json()["id"].removeprefix("cmpl-")
        assert (await gen.client.get(f"/v1/jobs/{job_id}", headers=bearer(BOB))).status_code == 404
        mine = await gen.client.get(f"/v1/jobs/{job_id}", headers=bearer(ALICE))
        assert mine.json()["status"] == "succeeded"


async def test_max_queued_jobs_of_a_key_is_429_with_retry_after_on_every_route(
    make_gen: Any,
) -> None:
    async with make_gen(auth(max_queued_jobs=1)) as gen:
        assert (await submit_job(gen, bearer(ALICE))).status_code == 202
        chat = {"model": "g", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        for path, body in [
            ("/v1/completions", COMPLETION),
            ("/v1/completions", {**COMPLETION, "stream": True}),
            ("/v1/chat/completions", chat),
        ]:
            resp = await gen.client.post(path, json=body, headers=bearer(ALICE))
            assert resp.status_code == 429, (path, resp.text)
            assert int(resp.headers["retry-after"]) >= 1
            assert "error" in resp.json()
        assert (await submit_job(gen, bearer(ALICE))).status_code == 429
        assert (await submit_job(gen, bearer(BOB))).status_code == 202  # bob is not capped
        await gen.serve(["o", "k"])  # alice's job ends: her slot under the cap is free
        assert (await submit_job(gen, bearer(ALICE))).status_code == 202


async def test_a_keys_rate_limit_is_429_with_retry_after_on_completions(make_gen: Any) -> None:
    async with make_gen(auth(rate_limit_per_s=0.01, burst=1)) as gen:
        assert (await submit_job(gen, bearer(ALICE))).status_code == 202
        resp = await gen.client.post(
            "/v1/completions", json={**COMPLETION, "stream": True}, headers=bearer(ALICE)
        )
        assert resp.status_code == 429, resp.text
        assert int(resp.headers["retry-after"]) >= 1


async def test_a_completions_priority_is_the_jobs_and_a_keys_max_priority_holds(
    make_gen: Any,
) -> None:
    async with make_gen(auth(max_priority="normal")) as gen:
        worker = asyncio.create_task(gen.serve(["o", "k"]))
        body = {**COMPLETION, "priority": "low"}
        resp = await gen.client.post("/v1/completions", json=body, headers=bearer(BOB))
        await worker
        job_id = resp.json()["id"].removeprefix("cmpl-")
        view = (await gen.client.get(f"/v1/jobs/{job_id}", headers=bearer(BOB))).json()
        assert view["priority"] == "low"
        high = {**COMPLETION, "priority": "high", "stream": True}
        refused = await gen.client.post("/v1/completions", json=high, headers=bearer(ALICE))
        assert refused.status_code == 403, refused.text


# -- Idempotency ---------------------------------------------------------------------
async def test_an_idempotency_key_on_completions_returns_the_same_job(gen: Any) -> None:
    idem = {"Idempotency-Key": "order-1"}
    worker = asyncio.create_task(gen.serve(["o", "k"]))
    first = await gen.client.post("/v1/completions", json=COMPLETION, headers=idem)
    await worker
    assert first.status_code == 200, first.text
    again = await gen.client.post("/v1/completions", json=COMPLETION, headers=idem)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["choices"][0]["text"] == "ok"
    assert (await gen.queue.stats("g")).counters.get("arrived", 0) == 1
    other = await gen.client.post(
        "/v1/completions", json={**COMPLETION, "prompt": "bye"}, headers=idem
    )
    # OpenAI's paths answer OpenAI's 400 where the jobs API says 422 (gateway.errors)
    assert other.status_code == 400, other.text
    assert other.json()["error"]["code"] == "idempotency_key_reused"


async def test_an_idempotency_key_on_a_streamed_completion_follows_the_same_job(
    gen: Any,
) -> None:
    idem = {"Idempotency-Key": "stream-1"}
    body = {**COMPLETION, "stream": True}
    worker = asyncio.create_task(gen.serve(["o", "k"]))
    first = await gen.client.post("/v1/completions", json=body, headers=idem)
    await worker
    again = await gen.client.post("/v1/completions", json=body, headers=idem)
    chunks = [json.loads(line[6:]) for line in again.text.splitlines() if line[6:7] == "{"]
    assert first.status_code == again.status_code == 200
    assert {c["id"] for c in chunks} == {_first_id(first.text)}
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == "ok"
    assert again.text.rstrip().endswith("data: [DONE]")


def _first_id(sse: str) -> str:
    line = next(x for x in sse.splitlines() if x.startswith("data: {"))
    return str(json.loads(line[6:])["id"])


async def test_an_idempotency_key_on_the_job_route_returns_the_same_job(gen: Any) -> None:
    idem = {"Idempotency-Key": "job-1"}
    first = await submit_job(gen, idem)
    again = await submit_job(gen, idem)
    assert first.status_code == 202, first.text
    assert again.status_code == 202 and again.json()["id"] == first.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert (await gen.queue.stats("g")).counters.get("arrived", 0) == 1
    other = await gen.client.post(
        "/v1/models/g/jobs", json={"input": {"prompt": "bye"}}, headers=idem
    )
    assert other.status_code == 422
    assert other.json()["error"]["type"] == "idempotency_key_reused"


# -- Deadlines -----------------------------------------------------------------------
async def test_a_stream_of_a_job_that_expires_in_the_queue_ends_with_an_error(gen: Any) -> None:
    job_id = await submit_with_deadline(gen, 50)
    reader = asyncio.create_task(gen.client.get(f"/v1/jobs/{job_id}/stream"))
    await _expire_the_queued_job(gen)
    resp = await asyncio.wait_for(reader, 20)
    got = events(resp.text)
    assert [e["event"] for e in got] == ["error"]
    assert got[0]["data"]["error"]["status"] == "expired"
    view = (await gen.client.get(f"/v1/jobs/{job_id}")).json()
    assert view["status"] == "expired"
    again = await gen.client.get(f"/v1/jobs/{job_id}/stream")  # read after the end
    assert [e["event"] for e in events(again.text)] == ["error"]


async def test_a_streamed_completion_that_expires_in_the_queue_ends_with_an_error_chunk(
    gen: Any,
) -> None:
    await submit_with_deadline(gen, 50)  # once accepted, the gateway has seen the worker
    await _expire_the_queued_job(gen)
    body = {**COMPLETION, "stream": True, "deadline_ms": 50}
    reader = asyncio.create_task(gen.client.post("/v1/completions", json=body))
    await async_wait_until(lambda: _queued(gen), what="the job to be queued")
    await _expire_the_queued_job(gen)
    resp = await asyncio.wait_for(reader, 20)
    assert resp.status_code == 200, resp.text
    assert "data: [DONE]" not in resp.text
    err = json.loads(resp.text.strip().splitlines()[-1][6:])["error"]
    assert err["code"] == "expired"


async def _queued(gen: Any) -> bool:
    return bool((await gen.queue.stats("g")).queued)


async def _expire_the_queued_job(gen: Any) -> None:
    """Wait until the one queued job's deadline has passed, then claim: it expires."""
    ids = await gen.redis.zrange(keys.queue_key("g", "16"), 0, -1)
    assert len(ids) == 1
    dl = int(await gen.redis.hget(keys.job_key("g", ids[0]), JobField.DL))

    async def past() -> bool:
        secs, micros = await gen.redis.time()
        return int(secs) * 1000 + int(micros) // 1000 > dl

    await async_wait_until(past, what="the deadline to pass")
    batch = await gen.queue.claim("g", "w1", max_batch=4)
    assert not batch.jobs and batch.expired == 1


# -- The job view and the dashboard --------------------------------------------------
async def test_the_job_view_shows_the_time_to_first_token(gen: Any) -> None:
    job_id = (await submit_job(gen)).json()["id"]
    before = (await gen.client.get(f"/v1/jobs/{job_id}")).json()
    assert "ttft_ms" not in before["timings"]
    await gen.redis.hset(keys.job_key("g", job_id), JobField.TTFT, "42")  # as step.lua does
    after = (await gen.client.get(f"/v1/jobs/{job_id}")).json()
    assert after["timings"]["ttft_ms"] == 42


async def test_the_dashboard_lists_the_generative_model_and_its_jobs(gen: Any) -> None:
    for _ in range(3):
        assert (await submit_job(gen)).status_code == 202
    await gen.serve(["o", "k"])
    state = (await gen.client.get("/dashboard/api/state")).json()
    model = next(m for m in state["models"] if m["name"] == "g")
    assert model["handler"] == "causal-lm"
    assert model["queued"] == 2 and model["in_flight"] == 0
    assert model["counters"]["arrived"] == 3 and model["counters"]["succeeded"] == 1
    assert model["latency"]["wait"]["count"] == 1
    assert model["generate"] is not None  # the generation panel (ADR 0149)
    plain = next(m for m in state["models"] if m["name"] == "m")
    assert plain["generate"] is None
