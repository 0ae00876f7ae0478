"""POST /v1/embeddings: OpenAI's request and response shape on the job machinery,
OpenAI-shaped errors -- on fakeredis and a real Redis, with the test playing the
worker; and the ``openai`` client itself pointed at the app."""

from __future__ import annotations

import asyncio
import base64
import struct
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from sluice.apikeys import hash_key
from sluice.config import SluiceConfig, parse_config
from sluice.jobs import Outcome
from tests.kit.gateway import Harness, HarnessFactory
from tests.waits import async_wait_until

EMB = "emb"
DIM = 4


def config(keys: list[dict[str, Any]] | None = None, **gateway: Any) -> SluiceConfig:
    """Model ``emb`` (synthetic embeddings, words as cost) and ``m`` (no embeddings)."""
    model = {
        "handler": "synthetic",
        "buckets": [32, 128, 512],
        "cost": {"method": "words"},
        "autoscaling": {"min_replicas": 0, "max_replicas": 2},
    }
    emb = {**model, "params": {"embedding_dim": DIM}}
    return parse_config(
        {
            "models": {"m": model, EMB: emb},
            "gateway": {"max_batch_inputs": 8, **gateway},
            "auth": {"keys": keys or []},
        }
    )


def vector(text: str) -> list[float]:
    return [float(len(text)), 0.5, -0.25, 1 / 3]


Result = Callable[[str, Any], Outcome]


def ok(job_id: str, value: Any) -> Outcome:
    return Outcome.ok(job_id, {"embedding": vector(value)})


async def serve(h: Harness, n: int, result: Result = ok, model: str = EMB) -> list[Any]:
    """Play a worker until ``n`` jobs are done; returns the claimed jobs in order."""
    done: list[Any] = []

    async def step() -> bool:
        batch = await h.queue.claim(model, "w1")
        if len(batch):
            await h.queue.complete(model, [result(j.id, j.input) for j in batch.jobs])
            done.extend(batch.jobs)
        return len(done) >= n

    await async_wait_until(step, what=f"{n} embedding jobs")
    return done


async def post(h: Harness, body: dict[str, Any], **kw: Any) -> httpx.Response:
    return await h.client.post("/v1/embeddings", json=body, **kw)


async def test_a_list_answers_in_openai_shape_in_input_order(make_gateway: HarnessFactory) -> None:
    async with make_gateway(config()) as h:
        texts = ["one", "two words", "three words here " * 10]
        worker = asyncio.create_task(serve(h, 3))
        resp = await post(h, {"model": EMB, "input": texts})
        jobs = await worker
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["object"] == "list" and body["model"] == EMB
        assert [d["index"] for d in body["data"]] == [0, 1, 2]
        assert all(d["object"] == "embedding" for d in body["data"])
        assert [d["embedding"] for d in body["data"]] == [vector(t) for t in texts]
        cost = 1 + 2 + 30
        assert body["usage"] == {"prompt_tokens": cost, "total_tokens": cost}
        assert sorted(j.input for j in jobs) == sorted(texts)


async def test_base64_is_little_endian_float32(make_gateway: HarnessFactory) -> None:
    async with make_gateway(config()) as h:
        worker = asyncio.create_task(serve(h, 1))
        resp = await post(h, {"model": EMB, "input": "hello", "encoding_format": "base64"})
        await worker
        assert resp.status_code == 200, resp.text
        raw = base64.b64decode(resp.json()["data"][0]["embedding"])
        got = struct.unpack(f"<{DIM}f", raw)
        assert got == pytest.approx(vector("hello"), rel=1e-7)


async def test_priority_and_idempotency_reach_the_jobs(make_gateway: HarnessFactory) -> None:
    async with make_gateway(config()) as h:
        worker = asyncio.create_task(serve(h, 2))
        body = {"model": EMB, "input": ["a", "b"], "priority": "high"}
        first = await post(h, body, headers={"Idempotency-Key": "k1"})
        jobs = await worker
        assert first.status_code == 200, first.text
        assert {(await h.queue.get(j.id)).priority for j in jobs} == {"high"}
        # The same key again answers from the same (ended) jobs: no new work queued.
        again = await post(h, body, headers={"Idempotency-Key": "k1"})
        assert again.json() == first.json()
        assert (await h.queue.stats(EMB)).queued == 0
        # Other inputs under the same key: refused in OpenAI's shape, nothing queued.
        other = await post(h, {**body, "input": ["a", "c"]}, headers={"Idempotency-Key": "k1"})
        assert other.status_code == 400, other.text
        assert other.json()["error"]["code"] == "idempotency_key_reused"
        assert (await h.queue.stats(EMB)).counters["arrived"] == 2


@pytest.mark.parametrize(
    ("body", "status", "code", "says"),
    [
        ({"model": "nope", "input": "x"}, 404, "model_not_found", "nope"),
        ({"model": EMB, "input": "x", "dimensions": 2}, 400, "invalid_input", "dimensions"),
        ({"model": EMB, "input": [1, 2, 3]}, 400, "invalid_input", "token arrays"),
        ({"model": EMB, "input": [[1, 2]]}, 400, "invalid_input", "token arrays"),
        ({"model": EMB, "input": []}, 400, "invalid_input", "empty list"),
        ({"model": EMB, "input": ["a", ""]}, 400, "invalid_input", "input[1]: must not be empty"),
        ({"model": EMB, "input": {"text": "a"}}, 400, "invalid_input", "string or a list"),
        ({"model": EMB, "input": ["a"] * 9}, 400, "invalid_input", "the limit is 8"),
        ({"model": "m", "input": "x"}, 400, "invalid_input", "does not return embeddings"),
        ({"model": EMB, "input": "x", "encoding_format": "hex"}, 400, "invalid_request", "format"),
        ({"model": EMB, "input": "x", "extra": 1}, 400, "invalid_request", "extra"),
        ({"input": "x"}, 400, "invalid_request", "model"),
    ],
)
async def test_refusals_are_openai_errors_and_queue_nothing(
    make_gateway: HarnessFactory, body: dict[str, Any], status: int, code: str, says: str
) -> None:
    async with make_gateway(config()) as h:
        resp = await post(h, body)
        assert resp.status_code == status, resp.text
        error = resp.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["code"] == code and says in error["message"], error
        assert error["type"] == "invalid_request_error"
        assert (await h.queue.stats(EMB)).queued == 0


async def test_a_body_that_is_not_json_is_an_openai_400(make_gateway: HarnessFactory) -> None:
    async with make_gateway(config()) as h:
        resp = await h.client.post(
            "/v1/embeddings", content=b"{nope", headers={"content-type": "application/json"}
        )
        assert resp.status_code == 400
        assert resp.json()["error"]["code"] == "invalid_json"


def failed(error_type: str) -> Result:
    def result(job_id: str, value: Any) -> Outcome:
        return Outcome.fail(job_id, error_type, f"{error_type} on {value}")

    return result


@pytest.mark.parametrize(
    ("error_type", "status", "type_"),
    [("invalid_input", 400, "invalid_request_error"), ("handler_error", 502, "server_error")],
)
async def test_a_failed_job_names_its_input(
    make_gateway: HarnessFactory, error_type: str, status: int, type_: str
) -> None:
    async with make_gateway(config()) as h:
        worker = asyncio.create_task(serve(h, 2, failed(error_type)))
        resp = await post(h, {"model": EMB, "input": ["a", "b"]})
        await worker
        assert resp.status_code == status, resp.text
        error = resp.json()["error"]
        assert error["type"] == type_ and error["message"].startswith("input[0]: ")


async def test_a_wait_past_the_timeout_is_504_and_cancels_the_jobs(
    make_gateway: HarnessFactory,
) -> None:
    async with make_gateway(config(predict_timeout_s=0.2)) as h:
        resp = await post(h, {"model": EMB, "input": ["a", "b"]})
        assert resp.status_code == 504, resp.text
        assert resp.json()["error"]["code"] == "timeout"
        assert "retry-after" in resp.headers
        assert (await h.queue.stats(EMB)).queued == 0  # nobody could ever read them
        # With an Idempotency-Key the jobs stay: the retry waits on the same ones.
        kept = await post(h, {"model": EMB, "input": "c"}, headers={"Idempotency-Key": "k"})
        assert kept.status_code == 504 and "Idempotency-Key" in kept.json()["error"]["message"]
        assert (await h.queue.stats(EMB)).queued == 1


async def test_the_openai_client_embeds_and_raises_its_own_errors(
    make_gateway: HarnessFactory,
) -> None:
    async with make_gateway(config()) as h:
        transport = h.client._transport  # the app, in process
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
            client = openai.AsyncOpenAI(
                base_url="http://gw/v1", api_key="unused", http_client=http, max_retries=0
            )
            worker = asyncio.create_task(serve(h, 3))
            # The client asks for base64 by default and decodes it itself.
            got = await client.embeddings.create(model=EMB, input=["x", "yy"])
            floats = await client.embeddings.create(model=EMB, input="zzz", encoding_format="float")
            await worker
            assert [d.embedding for d in got.data] == [
                pytest.approx(vector(t), rel=1e-7) for t in ("x", "yy")
            ]
            assert floats.data[0].embedding == vector("zzz")
            assert got.usage.prompt_tokens == 2 and got.model == EMB
            with pytest.raises(openai.NotFoundError) as nf:
                await client.embeddings.create(model="nope", input="x")
            assert nf.value.code == "model_not_found"
            with pytest.raises(openai.BadRequestError, match="dimensions"):
                await client.embeddings.create(model=EMB, input="x", dimensions=2)


async def test_api_keys_apply_with_openai_errors(make_gateway: HarnessFactory) -> None:
    keys = [{"name": "user", "hash": hash_key("sk-user"), "max_priority": "normal"}]
    async with make_gateway(config(keys)) as h:
        resp = await post(h, {"model": EMB, "input": "x"})
        assert resp.status_code == 401
        assert resp.json()["error"]["code"] == "invalid_api_key"
        user = {"Authorization": "Bearer sk-user"}
        high = await post(h, {"model": EMB, "input": "x", "priority": "high"}, headers=user)
        assert high.status_code == 403, high.text
        assert high.json()["error"]["code"] == "priority_not_allowed"
        worker = asyncio.create_task(serve(h, 1))
        fine = await post(h, {"model": EMB, "input": "x"}, headers=user)
        jobs = await worker
        assert fine.status_code == 200 and (await h.queue.get(jobs[0].id)).priority == "normal"
