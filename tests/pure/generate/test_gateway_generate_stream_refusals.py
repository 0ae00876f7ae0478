"""A streaming /v1/completions refused after its job was accepted leaves no job
running for nobody: the hub's slot is taken before the submit (429 / 503 with no
job made), and a failure between the submit and the response cancels the job
(unless an Idempotency-Key lets the retry find it)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway import service
from sluice.errors import RedisUnavailable
from sluice.jobs import JobStatus

pytestmark = pytest.mark.asyncio(loop_scope="function")
STREAM = {"model": "g", "prompt": "hi", "stream": True}


async def job_ids(gen: Any) -> list[str]:
    found = [k async for k in gen.redis.scan_iter("*:job:*")]
    return [k.rsplit(":job:", 1)[1] for k in found]


async def test_a_stream_past_the_hubs_cap_is_refused_before_any_job_exists(gen: Any) -> None:
    gen.state.tokens.max_listeners = 0
    resp = await gen.client.post("/v1/completions", json=STREAM)
    assert resp.status_code == 429, resp.text
    assert resp.json()["error"]["code"] == "too_many_streams"
    assert await job_ids(gen) == []


async def test_a_stream_while_shutting_down_is_refused_before_any_job_exists(gen: Any) -> None:
    gen.state.tokens.close()
    chat = {"model": "g", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    resp = await gen.client.post("/v1/chat/completions", json=chat)
    assert resp.status_code == 503, resp.text
    assert await job_ids(gen) == []


def fail_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    async def unavailable(*_: Any, **__: Any) -> Any:
        raise RedisUnavailable("Redis did not answer")

    monkeypatch.setattr(service, "get", unavailable)


async def test_a_failure_after_the_submit_cancels_the_job_and_frees_the_slot(
    gen: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_reads(monkeypatch)
    resp = await gen.client.post("/v1/completions", json=STREAM)
    assert resp.status_code == 503, resp.text
    [job_id] = await job_ids(gen)
    assert (await gen.queue.get(job_id)).status is JobStatus.CANCELLED
    assert gen.state.tokens.listeners == 0


async def test_with_an_idempotency_key_the_job_is_kept_for_the_retry(
    gen: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_reads(monkeypatch)
    headers = {"Idempotency-Key": "k1"}
    resp = await gen.client.post("/v1/completions", json=STREAM, headers=headers)
    assert resp.status_code == 503, resp.text
    [job_id] = await job_ids(gen)
    assert (await gen.queue.get(job_id)).status is JobStatus.QUEUED
    monkeypatch.undo()
    worker = asyncio.create_task(gen.serve(["ok"]))
    resp = await gen.client.post("/v1/completions", json=STREAM, headers=headers)
    assert await worker == job_id
    assert resp.status_code == 200 and resp.text.endswith("data: [DONE]\n\n")
    assert await job_ids(gen) == [job_id]
    assert gen.state.tokens.listeners == 0
