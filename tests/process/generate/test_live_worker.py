"""One real ``sluice worker`` on the tiny GPT, read two ways (one worker start,
not two: a start is ~8 CPU s of torch and transformers imports):

- the autoscaler's read (ADR 0149): the worker heartbeats its slots, busy slots
  and tokens/s, the step script fills the TTFT histogram, and the finished jobs
  teach the expected output: the Observer sees them all, and decide() records
  them;
- the gateway (uvicorn on a loopback port) in front of it, through OpenAI's
  client: a completion, a streamed chat and the SSE token stream.

The Observer's part runs first: its expected output is the mean of its six jobs,
which the gateway's jobs would shift. A stream that outlives its killed worker is
tests/process/generate/test_up_chat.py's (through `sluice up`), and
test_worker_kill.py's at the Redis level."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
import redis

from autoscaler.decisions import entry
from autoscaler.observation import GenerateSignals
from autoscaler.observe import Observer
from autoscaler.policy import PolicyState, decide
from gateway.app import create_app
from sluice.config import SluiceConfig
from sluice.generate.admission import new_job
from sluice.jobs import JobStatus
from sluice.queue import QueueClient
from tests.kit.http import HTTP
from tests.kit.served import served
from tests.waits import wait_until

pytestmark = [pytest.mark.system]
MODEL = "tiny-gpt"
READY_S = 120.0  # a cold worker imports torch and transformers on a loaded machine


def serve(cfg: SluiceConfig, redis_url: str) -> Iterator[str]:
    with served(create_app(cfg, redis_url), log_level="warning") as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def stack(
    redis_url: str, workers: Callable[[], Any], tiny_config: Callable[..., Any]
) -> Iterator[tuple[str, SluiceConfig]]:
    """The gateway's URL and the config, the worker started (not yet ready)."""
    w = workers()
    raw = tiny_config(lease_s=1.5, slots=4)
    # Accepted before the worker is ready: the first requests wait in the queue.
    raw["models"][MODEL]["autoscaling"] = {"min_replicas": 0}
    path, cfg = w.config(raw)
    w.spawn("w1", path)
    for base in serve(cfg, redis_url):
        yield base, cfg


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(api_key="unused", base_url=f"{base}/v1", max_retries=0, timeout=READY_S)


def job_result(base: str, reply_id: str) -> dict[str, Any]:
    job_id = reply_id.split("-", 1)[1]
    return dict(HTTP.get(f"{base}/v1/jobs/{job_id}").json()["result"])


def test_the_observer_then_the_gateway_read_a_live_generative_worker(
    r: redis.Redis, stack: tuple[str, SluiceConfig]
) -> None:
    base, cfg = stack
    the_observer_reads_a_live_generative_worker(r, cfg)
    completions_streams_and_sse_against_a_real_worker(base)


def the_observer_reads_a_live_generative_worker(r: redis.Redis, cfg: SluiceConfig) -> None:
    qc = QueueClient(r, dict(cfg.models))
    jobs = [new_job(cfg.model(MODEL), [5 + i, 17, 29], max_tokens=40) for i in range(6)]
    ids = [s.id for s in qc.submit(MODEL, jobs)]
    ob = Observer(qc, dict(cfg.models))
    seen: list[GenerateSignals] = []

    def read_until_done() -> bool:
        snap = ob.read(MODEL, current=1)
        if snap is not None and snap.observation.generate is not None:
            seen.append(snap.observation.generate)
        return all(qc.get(j).status == JobStatus.SUCCEEDED for j in ids)

    wait_until(read_until_done, READY_S, "the six jobs generated", every_s=0.1)
    assert any(g.slots == 4 and g.slots_total == 4 for g in seen)  # from the heartbeat
    assert max(g.slots_busy for g in seen) >= 2  # sequences held slots together
    wait_until(lambda: ob.read(MODEL, current=1) is not None, 10, "a read")
    snap = ob.read(MODEL, current=1)
    assert snap is not None and snap.observation.generate is not None
    g = snap.observation.generate
    assert g.ttft_p99_ms is not None and g.ttft_p50_ms is not None  # the step script's
    outputs = [len(qc.get(j).result["token_ids"]) for j in ids]
    assert g.expected_output_tokens == pytest.approx(sum(outputs) / len(outputs))
    assert any((x.tokens_per_s or 0) > 0 for x in seen)  # heartbeat tokens/s
    d = decide(cfg.model(MODEL).autoscaling, snap.observation, PolicyState(), 0.0)
    assert entry(d, snap.observation, 1).ttft_p99_ms == g.ttft_p99_ms


def completions_streams_and_sse_against_a_real_worker(base: str) -> None:
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
