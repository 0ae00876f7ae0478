"""Submit edge cases: an expired idempotent job, lone surrogates, large inputs off the loop."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from gateway import service
from sluice import keys
from sluice.jobs import JobRecord
from tests.kit.gateway import Harness, gateway_config

KEY = {"Idempotency-Key": "order-42"}


@pytest.mark.parametrize("kind", ["real"])
async def test_replay_after_the_job_expired_makes_a_new_job(make_gateway: Any) -> None:
    async with make_gateway() as h:
        first = await h.client.post("/v1/models/m/jobs", json={"input": "x y"}, headers=KEY)
        old = first.json()["id"]
        await h.redis.delete(keys.job_key("m", old))  # what the result TTL does
        again = await h.client.post("/v1/models/m/jobs", json={"input": "x y"}, headers=KEY)
        assert again.status_code == 202, again.text
        new = again.json()["id"]
        assert new != old and again.json()["status"] == "queued"
        assert "idempotent-replayed" not in again.headers
        assert (await h.client.get(f"/v1/jobs/{new}")).json()["status"] == "queued"
        third = await h.client.post("/v1/models/m/jobs", json={"input": "x y"}, headers=KEY)
        assert third.json()["id"] == new and third.headers["idempotent-replayed"] == "true"


@pytest.mark.parametrize("kind", ["real"])
async def test_replayed_job_expiring_before_the_read_is_submitted_again(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_gateway() as h:
        old = (await h.client.post("/v1/models/m/jobs", json={"input": "a"}, headers=KEY)).json()
        real_get = service.get
        expired: list[str] = []

        async def get_after_expiry(st: Any, job_id: str, owner: str | None = None) -> JobRecord:
            if not expired:  # the TTL fires between the submit script and this read
                expired.append(job_id)
                await h.redis.delete(keys.job_key("m", job_id))
            return await real_get(st, job_id, owner)

        monkeypatch.setattr(service, "get", get_after_expiry)
        again = await h.client.post("/v1/models/m/jobs", json={"input": "a"}, headers=KEY)
        assert expired == [old["id"]]
        assert again.status_code == 202, again.text
        assert again.json()["id"] != old["id"] and "idempotent-replayed" not in again.headers
        assert (await h.queue.stats("m")).counters["arrived"] == 2


async def _post(h: Harness, path: str, body: dict[str, Any]) -> Any:
    headers = {"content-type": "application/json"}
    return await h.client.post(path, content=json.dumps(body), headers=headers)


async def test_lone_surrogates_in_input_and_metadata_are_accepted(gw: Harness) -> None:
    # Sent as ASCII escapes: valid JSON, but not encodable as UTF-8 once parsed.
    body = {"input": "half \ud800 pair", "metadata": {"tag": "\udc00", "\udfff": 1}}
    resp = await _post(gw, "/v1/models/m/jobs", body)
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["id"]
    assert (await gw.queue.get(job_id)).input == "half \ud800 pair"
    view = await gw.client.get(f"/v1/jobs/{job_id}")
    assert view.status_code == 200, view.text
    assert view.json()["metadata"] == {"tag": "\udc00", "\udfff": 1}
    batch = await _post(gw, "/v1/models/m/jobs/batch", {"inputs": ["\ud83d", "ok"]})
    assert batch.status_code == 202, batch.text


def _record_threads(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each estimate ran on the main (event loop) thread."""
    on_loop: list[bool] = []
    real = service._estimate_each

    def spy(est: Any, inputs: list[Any]) -> Any:
        on_loop.append(threading.current_thread() is threading.main_thread())
        return real(est, inputs)

    monkeypatch.setattr(service, "_estimate_each", spy)
    return on_loop


@pytest.mark.parametrize("kind", ["fake"])
async def test_large_inputs_are_estimated_off_the_loop(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = gateway_config(
        gateway={"max_body_bytes": 1 << 20},
        cost={"method": "chars"},
        buckets=[32, 128, 512, 100_000],
        batching={"max_batch_tokens": 100_000},
    )
    async with make_gateway(cfg) as h:
        on_loop = _record_threads(monkeypatch)
        small = await h.client.post("/v1/models/m/jobs", json={"input": "a b c"})
        big_text = "word " * 40_000  # 200 000 chars: over the offload threshold
        big = await h.client.post("/v1/models/m/jobs", json={"input": {"text": big_text}})
        assert small.status_code == big.status_code == 202, big.text
        assert on_loop == [True, False]
        too_big = await h.client.post("/v1/models/m/jobs", json={"input": "x" * 500_000})
        assert too_big.status_code == 413  # the same mapping from the worker thread
        assert too_big.json()["error"]["message"].startswith("input: input cost")
        bad = await h.client.post(
            "/v1/models/m/jobs/batch", json={"inputs": ["y" * 20_000, {"text": 3}]}
        )
        assert bad.status_code == 422 and "inputs[1]" in bad.json()["error"]["message"]
        assert on_loop[2:] == [False, False]
        rejected = h.state.metrics.rejected
        assert rejected.labels("m", "input_too_large")._value.get() == 1
        assert rejected.labels("m", "invalid_input")._value.get() == 2


async def test_the_loop_keeps_answering_while_a_large_input_is_estimated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A slow estimate of a large input does not hold other coroutines up."""
    gate = threading.Event()
    real = service._estimate_each

    def slow(est: Any, inputs: list[Any]) -> Any:
        gate.wait(5)  # a stand-in for a long tokenizer run
        return real(est, inputs)

    monkeypatch.setattr(service, "_estimate_each", slow)

    cfg = gateway_config(
        cost={"method": "chars"}, buckets=[32, 100_000], batching={"max_batch_tokens": 100_000}
    ).models["m"]

    class St:
        estimators = {"m": service.CostEstimator(cfg)}

    task = asyncio.create_task(service._estimate_all(St(), "m", ["z " * 10_000]))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)  # the loop runs on while the thread waits
    assert not task.done()
    gate.set()
    assert (await asyncio.wait_for(task, 5))[0].bucket == "100000"


def _tokenizer_cfg() -> Any:
    return gateway_config(
        gateway={"max_body_bytes": 1 << 20}, cost={"method": "tokenizer", "truncate": True}
    )


@pytest.mark.parametrize("kind", ["fake"])
async def test_lone_surrogate_with_a_tokenizer_model_is_a_clear_422(make_gateway: Any) -> None:
    async with make_gateway(_tokenizer_cfg()) as h:
        assert h.state.estimators["m"].method == "tokenizer"
        for text in ("a \ud800 b", "long " * 2000 + "\udc00"):  # inline and off the loop
            resp = await _post(h, "/v1/models/m/jobs", {"input": text})
            assert resp.status_code == 422, resp.text
            assert "lone surrogate" in resp.json()["error"]["message"]


async def test_tokenizing_a_large_input_leaves_the_loop_running() -> None:
    """The tokenizer releases the GIL in the worker thread: the loop keeps ticking."""

    class St:
        estimators = {"m": service.CostEstimator(_tokenizer_cfg().models["m"])}

    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    before = ticks
    est = await service._estimate_all(St(), "m", ["lorem ipsum dolor sit amet " * 15_000])  # type: ignore[arg-type]
    during = ticks - before
    ticker.cancel()
    assert est[0].truncated_to == 512
    # ~0.2 s of tokenizing: with the GIL held the loop would not tick at all.
    assert during >= 10, f"the loop ticked {during} times while tokenizing"
