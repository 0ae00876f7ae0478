"""The gateway (uvicorn on a loopback port) in front of a real ``sluice worker`` on
the tiny GPT, through OpenAI's client: a completion, a streamed chat and the SSE
token stream. A stream that outlives its killed worker is
tests/process/generate/test_up_chat.py's (through `sluice up`), and
test_worker_kill.py's at the Redis level."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from gateway.app import create_app
from sluice.config import SluiceConfig
from tests.kit.http import HTTP
from tests.kit.served import served

pytestmark = [pytest.mark.system]
MODEL = "tiny-gpt"
READY_S = 120.0  # a cold worker imports torch and transformers on a loaded machine


def serve(cfg: SluiceConfig, redis_url: str) -> Iterator[str]:
    with served(create_app(cfg, redis_url), log_level="warning") as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def stack(
    redis_url: str, workers: Callable[[], Any], tiny_config: Callable[..., Any]
) -> Iterator[tuple[str, Any, Any]]:
    w = workers()
    raw = tiny_config(lease_s=1.5)
    # Accepted before the worker is ready: the first requests wait in the queue.
    raw["models"][MODEL]["autoscaling"] = {"min_replicas": 0}
    path, cfg = w.config(raw)
    first = w.spawn("w1", path)
    for base in serve(cfg, redis_url):
        yield base, w, (path, first)


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(api_key="unused", base_url=f"{base}/v1", max_retries=0, timeout=READY_S)


def job_result(base: str, reply_id: str) -> dict[str, Any]:
    job_id = reply_id.split("-", 1)[1]
    return dict(HTTP.get(f"{base}/v1/jobs/{job_id}").json()["result"])


def test_completions_streams_and_sse_against_a_real_worker(stack: tuple[str, Any, Any]) -> None:
    base, _, _ = stack
    c = client(base)
    out = c.completions.create(model=MODEL, prompt="the queue", max_tokens=12, temperature=0)
    assert out.usage is not None and 0 < out.usage.completion_tokens <= 12
    assert out.choices[0].text == job_result(base, out.id)["text"]
    again = c.completions.create(model=MODEL, prompt="the queue", max_tokens=12, temperature=0)
    assert again.choices[0].text == out.choices[0].text  # greedy: the same text
    chunks = list(
        c.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == job_result(base, chunks[0].id)["text"]
    assert chunks[-1].usage is not None
    job = HTTP.post(
        f"{base}/v1/models/{MODEL}/jobs",
        json={"input": {"prompt": "a stream", "max_tokens": 8, "temperature": 0}},
    ).json()["id"]
    with HTTP.stream("GET", f"{base}/v1/jobs/{job}/stream", timeout=READY_S) as resp:
        kinds = [line[7:] for line in resp.iter_lines() if line.startswith("event: ")]
    assert kinds[0] == "start" and kinds[-1] == "end" and "tokens" in kinds
