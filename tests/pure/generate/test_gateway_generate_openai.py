"""/v1/completions and /v1/chat/completions through OpenAI's own client (over the
ASGI app), streaming and not, with a fake worker writing the job's stream; and
their refusals in OpenAI's error shape."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

pytestmark = pytest.mark.asyncio(loop_scope="function")


def client(gen: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="unused", base_url="http://gw/v1", http_client=gen.client, max_retries=0
    )


async def test_a_completion_waits_for_the_job_and_answers_openais_shape(gen: Any) -> None:
    worker = asyncio.create_task(gen.serve(["Hel", "lo"]))
    out = await client(gen).completions.create(model="g", prompt="hey", max_tokens=8)
    job_id = await worker
    assert out.id == f"cmpl-{job_id}" and out.object == "text_completion" and out.model == "g"
    assert out.choices[0].text == "Hello" and out.choices[0].finish_reason == "stop"
    assert out.usage is not None
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (3, 5)


async def test_a_chat_completion_answers_the_assistants_message(gen: Any) -> None:
    worker = asyncio.create_task(gen.serve(["Hi", "!"]))
    out = await client(gen).chat.completions.create(
        model="g", messages=[{"role": "user", "content": "hello"}], max_completion_tokens=4
    )
    await worker
    assert out.object == "chat.completion"
    assert out.choices[0].message.role == "assistant"
    assert out.choices[0].message.content == "Hi!"


async def test_a_streamed_completion_sends_text_chunks_then_the_finish_and_usage(
    gen: Any,
) -> None:
    worker = asyncio.create_task(gen.serve(["a", "b", "c"]))
    chunks = [
        c
        async for c in await client(gen).completions.create(
            model="g",
            prompt="x",
            stream=True,
            temperature=0,
            stream_options={"include_usage": True},
        )
    ]
    await worker
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == "abc"
    finals = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finals[-1] == "stop" and set(finals[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 3


async def test_a_streamed_chat_sends_the_role_first_and_no_text_twice_across_a_restart(
    gen: Any,
) -> None:
    worker = asyncio.create_task(gen.serve(["He", "l", "lo"], restart_after=2))
    stream = await client(gen).chat.completions.create(
        model="g", messages=[{"role": "user", "content": "hi"}], stream=True, seed=3
    )
    chunks = [c async for c in stream]
    await worker
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content or "" for c in chunks]
    assert "".join(pieces) == "Hello"
    assert [p for p in pieces if p] == ["He", "l", "lo"]  # the re-run's repeats are skipped
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_a_streamed_job_that_fails_sends_an_error_the_client_raises(gen: Any) -> None:
    async def fail() -> None:
        job_id, _ = await gen.claim_next()
        await gen.client.delete(f"/v1/jobs/{job_id}")  # cancelled while it runs

    worker = asyncio.create_task(fail())
    stream = await client(gen).completions.create(model="g", prompt="x", stream=True)
    with pytest.raises(openai.APIError):
        async for _ in stream:
            pass
    await worker


@pytest.mark.parametrize(
    ("kw", "param"),
    [
        ({"n": 2}, "n"),
        ({"logprobs": 2}, "logprobs"),
        ({"echo": True}, "echo"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": [1, 2]}, "prompt"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"extra_body": {"best_of_n": 3}}, "best_of_n"),
    ],
)
async def test_unsupported_completion_params_are_400_naming_the_param(
    gen: Any, kw: dict[str, Any], param: str
) -> None:
    args = {"model": "g", "prompt": "x", **kw}
    with pytest.raises(openai.BadRequestError) as e:
        await client(gen).completions.create(**args)
    assert e.value.status_code == 400
    body = e.value.body
    assert isinstance(body, dict) and body["param"] == param, body


@pytest.mark.parametrize(
    ("kw", "param"),
    [
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"n": 3}, "n"),
    ],
)
async def test_unsupported_chat_params_are_400(gen: Any, kw: dict[str, Any], param: str) -> None:
    msgs = [{"role": "user", "content": "x"}]
    with pytest.raises(openai.BadRequestError) as e:
        await client(gen).chat.completions.create(model="g", messages=msgs, **kw)
    assert isinstance(e.value.body, dict) and e.value.body["param"] == param


async def test_model_errors_are_openais(gen: Any) -> None:
    c = client(gen)
    with pytest.raises(openai.NotFoundError) as nf:
        await c.completions.create(model="nope", prompt="x")
    assert isinstance(nf.value.body, dict) and nf.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        await c.completions.create(model="m", prompt="x")
    assert isinstance(bad.value.body, dict) and bad.value.body["code"] == "model_not_generative"
    with pytest.raises(openai.BadRequestError) as long:
        await c.completions.create(model="g", prompt="x" * 60, max_tokens=10)
    body = long.value.body
    assert isinstance(body, dict) and body["code"] == "context_length_exceeded"
    resp = await gen.client.post("/v1/chat/completions", json={"model": "g", "messages": []})
    assert resp.status_code == 400 and set(resp.json()["error"]) == {
        "message",
        "type",
        "param",
        "code",
    }
