"""Real ``sluice worker`` processes on the tiny GPT (ADR 0147): a worker killed
mid-generation loses nothing (another runs the job again after the lease, the
stream says restart, a follower ends with the text of an uninterrupted greedy run
and no token twice); SIGTERM finishes the sequences in slots and exits 0. One
test, two worker starts: the worker that takes the killed one's job over is the
one SIGTERM drains (a start is ~8 CPU s of torch and transformers imports)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import pytest
import redis

from sluice.generate.admission import new_job
from sluice.generate.prompt import PromptCodec
from sluice.generate.stream import Follower, read_stream_sync
from sluice.generate.tiny import resolve_tokenizer_dir
from sluice.jobs import JobStatus
from sluice.queue import QueueClient
from sluice.records import StreamEvent
from tests.waits import wait_until

pytestmark = [pytest.mark.system]
MODEL = "tiny-gpt"
PROMPT = "the worker kept the stream going while the other one"
MAX_TOKENS = 160
READY_S = 120.0  # a cold worker imports torch and transformers on a loaded machine
# A look every 50 ms, not 10: the waits span a cold worker's start (~10 s), and a
# 160-token run still has well over 8 tokens to go when the first 8 are seen.
POLL_S = 0.05


class Reader:
    """A client following one job's stream: the deltas it was shown, in order."""

    def __init__(self, r: redis.Redis, job: str) -> None:
        self.r, self.job = r, job
        self.follower, self.after = Follower(), "0-0"
        self.shown: list[int] = []
        self.types: list[StreamEvent] = []

    def poll(self) -> int:
        for entry in read_stream_sync(self.r, MODEL, self.job, self.after):
            self.after = entry.id
            self.types.append(entry.type)
            for d in self.follower.feed(entry):
                assert d.index == len(self.shown)  # each delta where the last one ended
                self.shown += d.token_ids
        return len(self.shown)


def submit(qc: QueueClient, cfg: Any, ids: list[int]) -> str:
    job = new_job(cfg.model(MODEL), ids, max_tokens=MAX_TOKENS, temperature=0.0)
    return qc.submit(MODEL, [job])[0].id


def done(qc: QueueClient, job: str) -> bool:
    return qc.get(job).status == JobStatus.SUCCEEDED


def test_a_killed_workers_job_runs_again_and_sigterm_then_drains_its_successor(
    r: redis.Redis, workers: Callable[[], Any], tiny_config: Callable[..., Any]
) -> None:
    """Two worker starts, not three: the worker that took the killed one's job over
    is the one SIGTERM then drains (its own config: 2 slots, 5 s leases)."""
    w = workers()
    path, cfg = w.config(tiny_config(lease_s=1.5))
    qc = QueueClient(r, dict(cfg.models))
    ids = PromptCodec.load(resolve_tokenizer_dir("tiny:4x256")).encode(PROMPT)
    second_path, _ = w.config(tiny_config(lease_s=5, slots=2), "second.yaml")
    second = killed_mid_generation(r, w, qc, cfg, ids, (path, second_path))
    sigterm_finishes_the_sequences_in_slots_and_exits_0(r, w, qc, cfg, ids, second)


def killed_mid_generation(
    r: redis.Redis, w: Any, qc: QueueClient, cfg: Any, ids: list[int], paths: tuple[Any, Any]
) -> Any:
    """A worker killed mid-generation loses nothing and no token shows twice: the
    second worker (returned) runs the job again after the lease."""
    job = submit(qc, cfg, ids)
    first = w.spawn("w1", paths[0])
    reader = Reader(r, job)
    wait_until(lambda: reader.poll() >= 8, READY_S, "the first worker's tokens", POLL_S)
    first.proc.kill()  # SIGKILL mid-generation: no drain, no hand-back
    first.proc.wait(10)
    before = reader.poll()
    assert not done(qc, job) and before < MAX_TOKENS
    second = w.spawn("w2", paths[1])
    wait_until(lambda: done(qc, job), READY_S, "the job run again by the second worker", POLL_S)
    reader.poll()
    rec = qc.get(job)
    assert rec.attempts == 2 and rec.result["attempt"] == 2
    assert StreamEvent.RESTART in reader.types and reader.follower.restarts >= 1
    # The same prompt again, uninterrupted, on the second worker: the reference.
    ref = submit(qc, cfg, ids)
    wait_until(lambda: done(qc, ref), READY_S, "the uninterrupted run", POLL_S)
    ref_result = qc.get(ref).result
    assert reader.follower.done
    assert reader.follower.text == ref_result["text"] == rec.result["text"]
    assert reader.shown == list(ref_result["token_ids"])  # every token once, in order
    assert second.alive(), w.log(second)
    return second


def sigterm_finishes_the_sequences_in_slots_and_exits_0(
    r: redis.Redis, w: Any, qc: QueueClient, cfg: Any, ids: list[int], worker: Any
) -> None:
    """SIGTERM finishes the sequences in the worker's two slots and exits 0; a job
    queued meanwhile is claimed by no one."""
    jobs = [submit(qc, cfg, ids) for _ in range(2)]
    readers = [Reader(r, j) for j in jobs]
    wait_until(lambda: all(x.poll() >= 4 for x in readers), READY_S, "both streaming", POLL_S)
    queued = submit(qc, cfg, ids)
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(60) == 0, w.log(worker)
    for job in jobs:  # finished where they ran: nothing lost, nothing run twice
        rec = qc.get(job)
        assert rec.status == JobStatus.SUCCEEDED and rec.attempts == 1
    assert qc.get(queued).status == JobStatus.QUEUED  # claimed by no one
