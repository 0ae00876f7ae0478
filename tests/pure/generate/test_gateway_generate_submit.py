"""Generative submits through the jobs API: the prompt tokenized and admitted, the
stored input a GenerateInput, strict 422s, and the result read back."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.generate_service import stop_sequences
from sluice.generate.params import GenerateInput

pytestmark = pytest.mark.asyncio(loop_scope="function")


async def submit(gen: Any, value: Any, **extra: Any) -> Any:
    return await gen.client.post("/v1/models/g/jobs", json={"input": value, **extra})


async def stored_input(gen: Any, job_id: str) -> GenerateInput:
    return await gen.claim(job_id)


async def test_a_prompt_is_tokenized_admitted_and_stored_as_a_generate_input(gen: Any) -> None:
    resp = await submit(gen, {"prompt": "hey", "max_tokens": 5, "temperature": 0})
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert body["cost"] == 3 + 5  # the prompt plus the expected output, capped at max_tokens
    assert body["bucket"] == "16"
    gi = await stored_input(gen, body["id"])
    assert gi.prompt_ids == (ord("h"), ord("e"), ord("y"))
    assert gi.sampling.max_tokens == 5 and gi.sampling.greedy and gi.sampling.seed is None


async def test_a_sampled_job_without_a_seed_gets_one_and_a_given_seed_is_kept(gen: Any) -> None:
    a = (await submit(gen, {"prompt": "a", "top_k": 4, "stop": "."})).json()["id"]
    b = (await submit(gen, {"prompt": "b", "seed": 7, "stop": [".", "!"]})).json()["id"]
    first = await stored_input(gen, a)
    second = await stored_input(gen, b)
    assert first.sampling.seed is not None and first.sampling.top_k == 4
    assert first.sampling.stop == (".",)
    assert second.sampling.seed == 7 and second.sampling.stop == (".", "!")


async def test_without_max_tokens_the_default_is_clipped_to_what_fits(gen: Any) -> None:
    prompt = "x" * (gen.max_seq - 4)
    job_id = (await submit(gen, {"prompt": prompt, "temperature": 0})).json()["id"]
    assert (await stored_input(gen, job_id)).sampling.max_tokens == 4


async def test_chat_messages_go_through_the_chat_template(gen: Any) -> None:
    msgs = [{"role": "user", "content": "hi"}]
    job_id = (await submit(gen, {"messages": msgs, "temperature": 0})).json()["id"]
    gi = await stored_input(gen, job_id)
    assert "".join(chr(i) for i in gi.prompt_ids) == "user: hi\nassistant: "


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("just text", "an object with 'prompt' or 'messages'"),
        ({"max_tokens": 3}, "exactly one of 'prompt'"),
        ({"prompt": "a", "messages": [{"role": "user", "content": "a"}]}, "exactly one"),
        ({"prompt": ""}, "input.prompt"),
        ({"prompt": "a", "max_tokens": 0}, "input.max_tokens"),
        ({"prompt": "a", "max_tokens": "5"}, "input.max_tokens"),
        ({"prompt": "a", "temperature": 3}, "input.temperature"),
        ({"prompt": "a", "top_p": 0}, "input.top_p"),
        ({"prompt": "a", "stop": ["1", "2", "3", "4", "5"]}, "the limit is 4"),
        ({"prompt": "a", "stop": [""]}, "must not be empty"),
        ({"prompt": "a", "beams": 2}, "input.beams"),
        ({"messages": [{"content": "no role"}]}, "messages: each message needs"),
    ],
)
async def test_bad_inputs_are_422_naming_the_field(gen: Any, value: Any, says: str) -> None:
    resp = await submit(gen, value)
    assert resp.status_code == 422, resp.text
    assert says in resp.json()["error"]["message"]


async def test_a_prompt_that_can_never_fit_is_refused_at_submit(gen: Any) -> None:
    resp = await submit(gen, {"prompt": "x" * 40, "max_tokens": gen.max_seq - 39})
    assert resp.status_code == 422
    err = resp.json()["error"]
    assert err["type"] == "context_length_exceeded" and str(gen.max_seq) in err["message"]
    resp = await submit(gen, {"prompt": "x" * gen.max_seq})
    assert resp.json()["error"]["type"] == "context_length_exceeded"


async def test_a_batch_of_generative_inputs_is_admitted_each_and_all_or_none(gen: Any) -> None:
    ok = {"prompt": "a", "max_tokens": 2}
    resp = await gen.client.post("/v1/models/g/jobs/batch", json={"inputs": [ok, ok]})
    assert resp.status_code == 202 and len(resp.json()["jobs"]) == 2
    resp = await gen.client.post(
        "/v1/models/g/jobs/batch", json={"inputs": [ok, {"prompt": "x" * gen.max_seq}]}
    )
    assert resp.status_code == 422 and "inputs[1]" in resp.json()["error"]["message"]


async def test_idempotent_replay_returns_the_same_generative_job(gen: Any) -> None:
    headers = {"Idempotency-Key": "k1"}
    value = {"input": {"prompt": "ab"}}
    first = await gen.client.post("/v1/models/g/jobs", json=value, headers=headers)
    again = await gen.client.post("/v1/models/g/jobs", json=value, headers=headers)
    assert first.json()["id"] == again.json()["id"]
    assert again.headers.get("Idempotent-Replayed") == "true"


async def test_predict_and_get_return_the_generate_result(gen: Any) -> None:
    task = asyncio.create_task(gen.serve(["He", "llo"]))
    resp = await gen.client.post("/v1/models/g/predict", json={"input": {"prompt": "hey"}})
    await task
    assert resp.status_code == 200, resp.text
    result = resp.json()["result"]
    assert result["text"] == "Hello" and result["finish_reason"] == "stop"
    assert result["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    again = await gen.client.get(resp.headers["Location"])
    assert again.json()["result"] == result


async def test_stop_sequences_take_a_string_or_up_to_four() -> None:
    assert stop_sequences(None) == ()
    assert stop_sequences("x") == ("x",)
    with pytest.raises(ValueError, match="limit is 4"):
        stop_sequences(["a"] * 5)


async def test_the_models_own_prompt_codec_tokenizes_once_per_model() -> None:
    from gateway.generate_service import Codecs, prepare
    from sluice.config import ModelConfig
    from sluice.generate.prompt import PromptCodec

    cfg = ModelConfig.model_validate(
        {"handler": "causal-lm", "params": {"model": "tiny:2x64"}, "generate": {}}
    )
    codecs = Codecs()
    chat = [{"role": "user", "content": "hi"}]
    values, estimates = await prepare(
        codecs, "g", cfg, [{"prompt": "hello world", "temperature": 0}, {"messages": chat}]
    )
    codec = PromptCodec.for_model(cfg)
    assert values[0]["prompt_ids"] == codec.encode("hello world")
    assert values[1]["prompt_ids"] == codec.chat(chat)
    assert estimates[0].cost > len(values[0]["prompt_ids"])
    assert await codecs.get("g", cfg) is await codecs.get("g", cfg)
