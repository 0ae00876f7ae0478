"""The issue's promise end to end: ``sluice up`` on the example generative config,
a chat completion streamed with the ``openai`` client, the worker killed
mid-stream, and the stream still ends with the right text, no token twice."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from openai.types.chat import ChatCompletionMessageParam

from tests.kit.upstack import Up, launch, shut_down
from tests.waits import wait_until

pytestmark = [pytest.mark.system]

ROOT = Path(__file__).resolve().parents[3]
MODEL = "tiny-gpt"
READY_S = 180.0  # a cold worker imports torch and transformers on a loaded machine
MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Tell me a long story about a queue."}
]


def _config() -> dict[str, Any]:
    raw = yaml.safe_load((ROOT / "examples" / "generate.yaml").read_text())
    model = raw["models"][MODEL]
    model["params"]["model"] = "tiny:2x64"  # the example's model, smaller: a test's budget
    model["batching"]["lease_s"] = 2  # a killed worker's job runs again soon
    raw.pop("gateway", None)  # launch picks the port
    raw["bulk"] = {"rq_workers": 0}  # no bulk job here: one process fewer to start
    return raw


def _client(up: Up) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="unused", base_url=f"{up.gateway}/v1", max_retries=0, timeout=READY_S
    )


def _chat(client: openai.OpenAI, **kw: Any) -> Any:
    return client.chat.completions.create(
        model=MODEL, messages=MESSAGES, temperature=0, max_tokens=200, **kw
    )


def test_a_streamed_chat_outlives_a_killed_worker(tmp_path: Path) -> None:
    up = launch(_config(), tmp_path)
    try:
        wait_until(lambda: up.ready(MODEL) >= 1, READY_S, "a ready tiny-gpt worker")
        client = _client(up)
        whole = _chat(client)  # uninterrupted: what the stream must end with
        want = whole.choices[0].message.content
        assert want and whole.usage.completion_tokens == 200

        stream = _chat(client, stream=True)
        pieces: list[str] = []
        killed: list[int] = []
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
            if len(pieces) == 5 and not killed:
                victims = [w for w in up.workers(MODEL) if w.slots_busy > 0 or w.busy]
                victims = victims or up.workers(MODEL)
                os.kill(victims[0].pid, signal.SIGKILL)
                killed.append(victims[0].pid)
        assert killed, "the stream ended before five pieces"
        assert "".join(pieces) == want  # the right text, no token twice
        # The job ran twice: the second run is another worker's (the stack replaced
        # the killed one).
        job_id = chunk.id.removeprefix("chatcmpl-")
        with up.queue() as qc:
            rec = qc.get(job_id, MODEL)
        assert rec.status == "succeeded" and rec.attempts >= 2
    finally:
        shut_down(up)
