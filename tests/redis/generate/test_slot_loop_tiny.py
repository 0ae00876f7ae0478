"""The slot loop over the real engine (the tiny random GPT-2, float64 so that the
batch's shape cannot flip a near-tie): jobs that join and leave the batch around
each other still get exactly ``generate()``'s greedy output, streamed in order."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from sluice.generate.admission import new_job
from sluice.generate.stream import Follower, read_stream_sync
from sluice.generate.tiny import resolve_model_dir
from sluice.jobs import JobStatus
from sluice.queue import QueueClient

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.kit.generate import greedy_reference  # noqa: E402

pytestmark = [pytest.mark.system]
MODEL = "gen"
SPEC = "tiny:4x256"


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def reference(prompt: list[int], max_tokens: int) -> list[int]:
    """generate() alone, greedy, in float64 as the engine runs here."""
    return greedy_reference(SPEC, prompt, max_tokens, torch.float64)


def test_jobs_joining_a_running_batch_get_generates_greedy_output(
    r: redis.Redis, gen_config: Callable[..., Any]
) -> None:
    from workers.generate.hf_engine import HFEngine
    from workers.generate.loop import SlotLoop

    cfg = gen_config(slots=2)
    gcfg = cfg.model(MODEL).generate
    engine = HFEngine(
        resolve_model_dir(SPEC),
        slots=2,
        max_seq_tokens=256,
        prefill_tokens_per_step=8,
        dtype="float64",
        device="cpu",
        threads=1,
    )
    qc = QueueClient(r, dict(cfg.models))
    loop = SlotLoop(engine, qc, MODEL, "w1", gcfg)
    cases = [(list(range(5, 25)), 6), ([7, 8, 9], 30), (list(range(100, 130)), 12)]
    jobs = []
    for prompt, n in cases:  # two start together; the third takes the first free slot
        jobs.append(
            qc.submit(MODEL, [new_job(cfg.model(MODEL), prompt, max_tokens=n, temperature=0.0)])[
                0
            ].id
        )
    for _ in range(200):
        if loop.turn().idle:
            break
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
