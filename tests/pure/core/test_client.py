"""sluice.client against a mock transport: retries, errors, long-poll loop."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from sluice.client import Client, JobFailed, SluiceClientError


def transport(handler: Any) -> httpx.MockTransport:
    return httpx.MockTransport(handler)


def test_429_is_retried_after_retry_after_then_succeeds() -> None:
    calls = []

    def handle(req: httpx.Request) -> httpx.Response:
        calls.append(req)
        if len(calls) < 3:
            body = {"error": {"type": "overloaded", "message": "full"}}
            return httpx.Response(429, headers={"Retry-After": "0.01"}, json=body)
        return httpx.Response(202, json={"id": "m.1", "status": "queued"})

    with Client("http://gw", transport=transport(handle)) as c:
        assert c.submit("m", "x", priority="low")["id"] == "m.1"
    assert len(calls) == 3
    assert json.loads(calls[-1].content) == {"input": "x", "priority": "low"}


def test_client_errors_carry_status_and_type() -> None:
    def handle(req: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"error": {"type": "unknown_model", "message": "no m"}})

    with (
        Client("http://gw", transport=transport(handle)) as c,
        pytest.raises(SluiceClientError) as e,
    ):
        c.submit("m", "x")
    assert e.value.status == 404 and e.value.type == "unknown_model"


def test_result_long_polls_until_the_job_ends() -> None:
    states = iter(["queued", "running", "succeeded"])
    waits = []

    def handle(req: httpx.Request) -> httpx.Response:
        waits.append(float(req.url.params["wait"]))
        return httpx.Response(200, json={"id": "m.1", "status": next(states), "result": [1]})

    with Client("http://gw", transport=transport(handle)) as c:
        assert c.result("m.1", timeout_s=60)["result"] == [1]
    assert len(waits) == 3 and all(0 < w <= 30 for w in waits)


def test_failed_job_raises_with_its_error() -> None:
    def handle(req: httpx.Request) -> httpx.Response:
        err = {"type": "ValueError", "message": "bad"}
        return httpx.Response(200, json={"id": "m.1", "status": "failed", "error": err})

    with Client("http://gw", transport=transport(handle)) as c, pytest.raises(JobFailed) as e:
        c.result("m.1")
    assert e.value.type == "ValueError" and e.value.job["status"] == "failed"


def test_map_keeps_input_order_under_concurrency() -> None:
    def handle(req: httpx.Request) -> httpx.Response:
        if req.method == "POST":
            value = json.loads(req.content)["input"]
            return httpx.Response(202, json={"id": f"m.{value}", "status": "queued"})
        n = int(req.url.path.rsplit(".", 1)[1])
        return httpx.Response(200, json={"id": f"m.{n}", "status": "succeeded", "result": n * n})

    with Client("http://gw", transport=transport(handle)) as c:
        assert c.map("m", range(50), concurrency=8) == [n * n for n in range(50)]


def test_dropped_connection_on_submit_is_retried_with_the_same_key() -> None:
    keys = []

    def handle(req: httpx.Request) -> httpx.Response:
        keys.append(req.headers["Idempotency-Key"])
        if len(keys) == 1:
            raise httpx.ConnectError("connection reset", request=req)
        return httpx.Response(202, json={"id": "m.1", "status": "queued"})

    with Client("http://gw", transport=transport(handle)) as c:
        assert c.submit("m", "x")["id"] == "m.1"
    assert len(keys) == 2 and keys[0] == keys[1] and len(keys[0]) == 32
