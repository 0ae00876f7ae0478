"""Submit, batch, read, long-poll, cancel, idempotency -- on fakeredis and a real Redis."""

from __future__ import annotations

import asyncio
import time

from sluice.jobs import NewJob, Outcome
from sluice.keys import partition_of
from sluice.queue import AsyncQueueClient
from tests.kit.gateway import Harness, gateway_config
from tests.waits import HUNG_S, async_wait_until

LONG_POLL_S = 60  # gateway.max_wait_s: answered well before it, a long-poll was woken


async def submit(h: Harness, body: dict, model: str = "m", **kw):  # type: ignore[no-untyped-def]
    return await h.client.post(f"/v1/models/{model}/jobs", json=body, **kw)


async def test_submit_answers_202_with_bucket_and_location(gw: Harness) -> None:
    resp = await submit(gw, {"input": "one two three " * 20, "priority": "high"})
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert body["status"] == "queued" and body["model"] == "m"
    assert body["cost"] == 60 and body["bucket"] == "128" and body["priority"] == "high"
    assert resp.headers["location"] == f"/v1/jobs/{body['id']}"
    job = (await gw.client.get(resp.headers["location"])).json()
    assert job["status"] == "queued" and job["bucket"] == "128" and job["attempts"] == 0
    assert job["timings"]["queued_at"] > 0 and job["timings"]["started_at"] is None
    stats = await gw.queue.stats("m")
    assert [b.queued for b in stats.buckets] == [0, 1, 0]


async def test_batch_keeps_input_order_and_is_all_or_nothing(gw: Harness) -> None:
    inputs = ["a", "b " * 100, "c " * 40]
    resp = await gw.client.post("/v1/models/m/jobs/batch", json={"inputs": inputs})
    assert resp.status_code == 202, resp.text
    jobs = resp.json()["jobs"]
    assert [j["bucket"] for j in jobs] == ["32", "128", "128"]
    assert [j["cost"] for j in jobs] == [1, 100, 40]
    for j, text in zip(jobs, inputs, strict=True):
        claimed = await gw.queue.get(j["id"])
        assert claimed.input == text
    too_big = await gw.client.post("/v1/models/m/jobs/batch", json={"inputs": ["x", "y " * 600]})
    assert too_big.status_code == 413
    assert "inputs[1]" in too_big.json()["error"]["message"]
    over = await gw.client.post("/v1/models/m/jobs/batch", json={"inputs": ["x"] * 9})
    assert over.status_code == 422 and "limit is 8" in over.json()["error"]["message"]
    assert (await gw.queue.stats("m")).queued == 3


async def _finish(h: Harness, result: object) -> str:
    batch = await h.queue.claim("m", "w1")
    assert len(batch) == 1
    await h.queue.complete("m", [Outcome.ok(batch.jobs[0].id, result)])
    return batch.jobs[0].id


async def test_long_poll_is_woken_by_the_completion(gw: Harness) -> None:
    job_id = (await submit(gw, {"input": "hello"})).json()["id"]
    poll = asyncio.create_task(gw.client.get(f"/v1/jobs/{job_id}", params={"wait": LONG_POLL_S}))
    await async_wait_until(lambda: gw.state.waiters.waiting == 1, what="the long-poll")
    assert not poll.done(), "the long-poll answered before the job ended"
    await _finish(gw, {"vec": [1, 2]})
    started = time.perf_counter()
    resp = await asyncio.wait_for(poll, LONG_POLL_S + 30)
    elapsed = time.perf_counter() - started
    body = resp.json()
    assert body["status"] == "succeeded" and body["result"] == {"vec": [1, 2]}
    assert body["attempts"] == 1 and body["timings"]["queue_wait_ms"] is not None
    # Far below the 60 s wait, far above any normal latency: woken, not timed out.
    assert elapsed < LONG_POLL_S / 2, f"woke after {elapsed:.1f}s: not by the notification"
    assert gw.state.waiters.waiting == 0


async def test_long_poll_times_out_with_the_job_as_it_is(gw: Harness) -> None:
    job_id = (await submit(gw, {"input": "hello"})).json()["id"]
    started = time.perf_counter()
    resp = await gw.client.get(f"/v1/jobs/{job_id}", params={"wait": 0.3})
    assert resp.status_code == 200 and resp.json()["status"] == "queued"
    assert 0.25 < time.perf_counter() - started < HUNG_S  # waited it out, did not hang
    bad = await gw.client.get(f"/v1/jobs/{job_id}", params={"wait": 61})
    assert bad.status_code == 422 and "wait" in bad.json()["error"]["message"]


async def test_idempotent_replay_returns_the_same_job(gw: Harness) -> None:
    headers = {"Idempotency-Key": "order-17"}
    first = await submit(gw, {"input": "x y"}, headers=headers)
    again = await submit(gw, {"input": "x y"}, headers=headers)
    assert first.status_code == again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    assert again.headers.get("idempotent-replayed") == "true"
    assert "idempotent-replayed" not in first.headers
    await _finish(gw, 1)
    third = await submit(gw, {"input": "x y"}, headers=headers)
    assert third.json()["id"] == first.json()["id"] and third.json()["status"] == "succeeded"
    stats = await gw.queue.stats("m")
    assert stats.counters["arrived"] == 1
    batch = {"inputs": ["a", "b c"]}
    first = await gw.client.post("/v1/models/m/jobs/batch", json=batch, headers=headers)
    again = await gw.client.post("/v1/models/m/jobs/batch", json=batch, headers=headers)
    ids = [j["id"] for j in first.json()["jobs"]]
    assert [j["id"] for j in again.json()["jobs"]] == ids and len(set(ids)) == 2
    assert first.json()["jobs"][0]["id"] != third.json()["id"]  # batch keys are <key>:<i>
    assert again.headers.get("idempotent-replayed") == "true"
    assert first.status_code == again.status_code == 202
    assert "idempotent-replayed" not in first.headers


async def test_idempotency_keys_replay_across_a_changed_partition_count(make_gateway) -> None:  # type: ignore[no-untyped-def]
    async with make_gateway(gateway_config(queue={"partitions": 3})) as h:  # wrote its count
        one = AsyncQueueClient(h.redis, dict(gateway_config().models))  # a client of count 1
        await one.refresh_partitions()
        keys_ = [f"order-{i}" for i in range(8)]
        made = [await submit(h, {"input": "x y"}, headers={"Idempotency-Key": k}) for k in keys_]
        ids = [r.json()["id"] for r in made]
        assert {partition_of(i) for i in ids} == {0, 1, 2}
        # lowered: the count-1 client's replays find each key where count 3 put it
        again = [await one.submit("m", [NewJob("x y", "32", 2, idempotency_key=k)]) for k in keys_]
        assert [s[0].id for s in again] == ids and not any(s[0].created for s in again)
        # raised: keys the count-1 client made (partition 0) replay through the gateway
        old = [f"k{i}" for i in range(8)]
        firsts = [
            (await one.submit("m", [NewJob("x y", "32", 2, idempotency_key=k)]))[0] for k in old
        ]
        replays = [await submit(h, {"input": "x y"}, headers={"Idempotency-Key": k}) for k in old]
        assert [r.json()["id"] for r in replays] == [s.id for s in firsts]
        assert all(r.headers.get("idempotent-replayed") == "true" for r in replays)
        assert (await h.state.queue.stats("m")).counters["arrived"] == 16  # no second jobs


async def test_a_reused_idempotency_key_with_another_body_is_422(gw: Harness) -> None:
    """As payment APIs do: the key names one request; another body under it is a
    client bug to report, not the first job to replay. The same request (keys in
    another order, a default spelt out) still replays; nothing is queued by a refusal."""
    headers = {"Idempotency-Key": "order-18"}
    first = await submit(gw, {"input": "x y"}, headers=headers)
    for other in (
        {"input": "x z"},
        {"input": "x y", "priority": "low"},
        {"input": "x y", "metadata": {}},
    ):
        resp = await submit(gw, other, headers=headers)
        assert resp.status_code == 422, resp.text
        error = resp.json()["error"]
        assert set(error) == {"type", "message"} and error["type"] == "idempotency_key_reused"
        assert "order-18" in error["message"] and "different body" in error["message"]
    same = await submit(gw, {"priority": "normal", "input": "x y"}, headers=headers)
    assert same.status_code == 202 and same.json()["id"] == first.json()["id"]
    batch = {"inputs": ["a", "b c"]}
    made = await gw.client.post("/v1/models/m/jobs/batch", json=batch, headers=headers)
    for other in ({"inputs": ["a", "b d"]}, {"inputs": ["a"]}, {**batch, "metadata": {"k": 1}}):
        resp = await gw.client.post("/v1/models/m/jobs/batch", json=other, headers=headers)
        assert resp.status_code == 422, resp.text
        assert resp.json()["error"]["type"] == "idempotency_key_reused"
    again = await gw.client.post("/v1/models/m/jobs/batch", json=batch, headers=headers)
    assert again.json() == made.json() and again.headers["idempotent-replayed"] == "true"
    assert (await gw.queue.stats("m")).counters["arrived"] == 3


async def test_cancel_queued_running_and_finished(gw: Harness) -> None:
    queued = (await submit(gw, {"input": "a"})).json()["id"]
    resp = await gw.client.delete(f"/v1/jobs/{queued}")
    assert resp.status_code == 200
    assert resp.json() == {"id": queued, "status": "cancelled", "previous_status": "queued"}
    assert (await gw.client.delete(f"/v1/jobs/{queued}")).status_code == 409
    running = (await submit(gw, {"input": "b"})).json()["id"]
    batch = await gw.queue.claim("m", "w1")
    assert batch.jobs[0].id == running
    resp = await gw.client.delete(f"/v1/jobs/{running}")
    assert resp.json()["previous_status"] == "running"
    accepted, stale = await gw.queue.complete("m", [Outcome.ok(running, "late")])
    assert (accepted, stale) == (0, 1)
    job = (await gw.client.get(f"/v1/jobs/{running}")).json()
    assert job["status"] == "cancelled" and job["result"] is None
    assert (await gw.client.delete("/v1/jobs/m.nope")).status_code == 404


async def test_predict_answers_200_when_done_and_202_when_not(gw: Harness) -> None:
    async def run_one() -> bool:
        batch = await gw.queue.claim("m", "w1")
        if len(batch):
            await gw.queue.complete("m", [Outcome.ok(batch.jobs[0].id, "done")])
        return bool(len(batch))

    task = asyncio.create_task(async_wait_until(run_one, what="the predict's job"))
    resp = await gw.client.post("/v1/models/m/predict", json={"input": "go"})
    await task
    assert resp.status_code == 200 and resp.json()["result"] == "done"
    slow = await gw.client.post("/v1/models/m/predict?timeout=0.2", json={"input": "wait"})
    assert slow.status_code == 202 and slow.json()["status"] == "queued"
    assert slow.headers["location"] == f"/v1/jobs/{slow.json()['id']}"


async def test_a_job_id_is_only_visible_through_its_own_model(gw: Harness) -> None:
    job_id = (await submit(gw, {"input": "a"})).json()["id"]
    token = job_id.split(".", 1)[1]
    assert (await gw.client.get(f"/v1/jobs/pinned.{token}")).status_code == 404
    assert (await gw.client.get(f"/v1/jobs/{token}")).status_code == 404
    assert (await gw.client.get(f"/v1/jobs/{job_id}")).status_code == 200


async def test_truncation_where_the_model_allows_it(make_gateway) -> None:  # type: ignore[no-untyped-def]
    cfg = gateway_config(cost={"method": "words", "truncate": True})
    async with make_gateway(cfg) as h:
        resp = await submit(h, {"input": "w " * 900})
        assert resp.status_code == 202
        assert resp.json()["truncated"] is True and resp.json()["bucket"] == "512"


async def test_a_result_with_nan_is_served_as_valid_json(gw: Harness) -> None:
    job_id = (await submit(gw, {"input": "x"})).json()["id"]
    await gw.queue.complete("m", [Outcome.ok(job_id, [1.5, float("nan"), float("inf")])])
    resp = await gw.client.get(f"/v1/jobs/{job_id}")
    assert resp.status_code == 200 and resp.json()["result"] == [1.5, None, None]
