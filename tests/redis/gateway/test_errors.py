"""Every error status, with the one error body, on fakeredis and a real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.kit.gateway import Harness, gateway_config


def error_of(resp) -> dict:  # type: ignore[no-untyped-def]
    body = resp.json()
    assert set(body["error"]) == {"type", "message"}, body
    return body["error"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "input"),
        ({"input": "x", "priority": "urgent"}, "priority"),
        ({"input": "x", "deadline_ms": -5}, "deadline_ms"),
        ({"input": "x", "metadata": [1]}, "metadata"),
        ({"input": "x", "colour": "red"}, "colour"),
        ({"input": 42}, "input"),
        ({"input": "x", "deadline_ms": 10**9}, "deadline_ms"),
    ],
)
async def test_invalid_bodies_are_422_naming_the_field(gw: Harness, body: dict, field: str) -> None:
    resp = await gw.client.post("/v1/models/m/jobs", json=body)
    assert resp.status_code == 422, resp.text
    assert field in error_of(resp)["message"]


async def test_unknown_model_and_job_are_404(gw: Harness) -> None:
    resp = await gw.client.post("/v1/models/nope/jobs", json={"input": "x"})
    assert resp.status_code == 404 and error_of(resp)["type"] == "unknown_model"
    resp = await gw.client.get("/v1/jobs/m.0000deadbeef")
    assert resp.status_code == 404 and error_of(resp)["type"] == "job_not_found"
    resp = await gw.client.get("/v1/no/such/route")
    assert resp.status_code == 404 and error_of(resp)["type"] == "not_found"


async def test_not_json_is_415_and_bad_json_is_422(gw: Harness) -> None:
    resp = await gw.client.post(
        "/v1/models/m/jobs", content=b"input=x", headers={"content-type": "text/plain"}
    )
    assert resp.status_code == 415 and error_of(resp)["type"] == "unsupported_media_type"
    resp = await gw.client.post(
        "/v1/models/m/jobs", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert resp.status_code == 422 and "JSON" in error_of(resp)["message"]


async def test_input_over_the_largest_bucket_is_413_naming_the_limit(gw: Harness) -> None:
    resp = await gw.client.post("/v1/models/m/jobs", json={"input": "w " * 600})
    assert resp.status_code == 413
    assert "512" in error_of(resp)["message"]
    assert (await gw.queue.stats("m")).queued == 0
    metrics = (await gw.client.get("/metrics")).text
    assert 'sluice_jobs_rejected_total{model="m",reason="input_too_large"} 1.0' in metrics


async def test_body_over_the_limit_is_413_before_it_is_read(gw: Harness) -> None:
    big = b'{"input": "' + b"x" * 5000 + b'"}'
    resp = await gw.client.post(
        "/v1/models/m/jobs", content=big, headers={"content-type": "application/json"}
    )
    assert resp.status_code == 413 and "4096" in error_of(resp)["message"]

    received: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        # No Content-Length: the guard counts the stream and stops it early.
        for _ in range(100):
            received.append(1)
            yield b" " * 1024

    resp = await gw.client.post(
        "/v1/models/m/jobs", content=chunks(), headers={"content-type": "application/json"}
    )
    assert resp.status_code == 413 and error_of(resp)["type"] == "input_too_large"
    assert len(received) < 100, "the whole stream was read before refusing it"


async def test_full_queue_sheds_low_then_normal_then_high(make_gateway) -> None:  # type: ignore[no-untyped-def]
    # max 10 jobs: low admitted up to 7 queued, normal up to 9, high up to 10.
    cfg = gateway_config(queue={"max_queued_jobs": 10})
    async with make_gateway(cfg) as h:
        codes = []
        for prio in ["low"] * 8 + ["normal"] * 3 + ["high"] * 2:
            resp = await h.client.post("/v1/models/m/jobs", json={"input": "x", "priority": prio})
            codes.append((prio, resp.status_code))
        assert codes == (
            [("low", 202)] * 7
            + [("low", 429)]
            + [("normal", 202)] * 2
            + [("normal", 429)]
            + [("high", 202), ("high", 429)]
        )
        resp = await h.client.post("/v1/models/m/jobs", json={"input": "x", "priority": "low"})
        assert error_of(resp)["type"] == "queue_full"
        assert int(resp.headers["retry-after"]) >= 1
        metrics = (await h.client.get("/metrics")).text
        assert 'sluice_jobs_rejected_total{model="m",reason="queue_jobs"} 4.0' in metrics


async def test_retry_after_follows_the_measured_drain_rate(make_gateway) -> None:  # type: ignore[no-untyped-def]
    cfg = gateway_config(queue={"max_queued_cost": 1000})
    async with make_gateway(cfg) as h:
        await h.heartbeat("m", "ready", rate=20.0)
        await h.client.post("/v1/models/m/jobs/batch", json={"inputs": ["w " * 200] * 3})
        await h.client.post("/v1/models/m/jobs", json={"input": "w " * 100, "priority": "high"})
        await h.refresh()
        low = {"input": "w " * 100, "priority": "low"}
        # Queued cost 700 = the low limit (0.7 x 1000); one more job of cost 100 is
        # 100 over it, which drains in 100 / 20 = 5 s at the measured rate.
        resp = await h.client.post("/v1/models/m/jobs", json=low)
        assert resp.status_code == 429 and resp.headers["retry-after"] == "5"
        await h.heartbeat("m", "ready", rate=50.0)
        await h.refresh()
        resp = await h.client.post("/v1/models/m/jobs", json=low)
        assert resp.headers["retry-after"] == "2"  # ceil(100 / 50)


async def test_retry_after_on_a_full_partition_uses_its_share(make_gateway) -> None:  # type: ignore[no-untyped-def]
    cfg = gateway_config(queue={"max_queued_cost": 3000, "partitions": 3})
    async with make_gateway(cfg) as h:
        await h.heartbeat("m", "ready", rate=30.0)
        for _ in range(3):  # round-robin: 600 in each partition
            await h.client.post("/v1/models/m/jobs/batch", json={"inputs": ["w " * 200] * 3})
        for _ in range(3):  # and 100 more: 700 each, a partition's share of the low limit
            high = {"input": "w " * 100, "priority": "high"}
            assert (await h.client.post("/v1/models/m/jobs", json=high)).status_code == 202
        await h.refresh()
        # low: 2100, ceil(2100 / 3) = 700 per partition; one more job of cost 100 is 100
        # over its partition's share, which drains at 30 / 3 = 10 per s: 10 s (compared
        # with the global 2100 it looked far under: the 1 s minimum)
        resp = await h.client.post(
            "/v1/models/m/jobs", json={"input": "w " * 100, "priority": "low"}
        )
        assert resp.status_code == 429 and resp.headers["retry-after"] == "10"


async def test_deadline_below_the_estimated_wait_is_shed(make_gateway) -> None:  # type: ignore[no-untyped-def]
    async with make_gateway() as h:
        await h.heartbeat("m", "ready", rate=100.0)
        await h.client.post("/v1/models/m/jobs/batch", json={"inputs": ["w " * 500] * 2})
        await h.refresh()
        # 1000 queued + 10 new at 100 cost/s is about 10.1 s of wait.
        ok = {"input": "w " * 10, "deadline_ms": 20_000}
        assert (await h.client.post("/v1/models/m/jobs", json=ok)).status_code == 202
        late = {"input": "w " * 10, "deadline_ms": 2_000}
        resp = await h.client.post("/v1/models/m/jobs", json=late)
        assert resp.status_code == 429 and error_of(resp)["type"] == "overloaded"
        assert resp.headers["retry-after"] == "9"  # ceil(10.2 - 2)


async def test_no_ready_worker_is_503_unless_the_model_scales_from_zero(gw: Harness) -> None:
    resp = await gw.client.post("/v1/models/pinned/jobs", json={"input": "x"})
    assert resp.status_code == 503 and error_of(resp)["type"] == "not_ready"
    assert resp.headers["retry-after"] == "9"  # the model's cold_start_s
    assert (await gw.client.post("/v1/models/m/jobs", json={"input": "x"})).status_code == 202
    await gw.heartbeat("pinned", "ready")
    await gw.refresh()
    assert (await gw.client.post("/v1/models/pinned/jobs", json={"input": "x"})).status_code == 202


async def test_cancel_of_a_finished_job_is_409(gw: Harness) -> None:
    from sluice.jobs import Outcome

    job_id = (await gw.client.post("/v1/models/m/jobs", json={"input": "x"})).json()["id"]
    batch = await gw.queue.claim("m", "w")
    await gw.queue.complete("m", [Outcome.ok(batch.jobs[0].id, 1)])
    resp = await gw.client.delete(f"/v1/jobs/{job_id}")
    assert resp.status_code == 409 and error_of(resp)["type"] == "conflict"
