"""Real ``sluice worker`` processes on the tiny GPT behind one in-process gateway,
one module-scoped stack (a worker start is ~8 CPU s of torch and transformers
imports; ADR 0172):

- the autoscaler's read (ADR 0149): the worker heartbeats its slots, busy slots
  and tokens/s, the step script fills the TTFT histogram, and the finished jobs
  teach the expected output: the Observer sees them all, and decide() records
  them;
- the gateway (uvicorn on a loopback port) in front of it, through OpenAI's
  client: a completion, a streamed chat and the SSE token stream;
- ADR 0147: the worker killed mid-generation loses nothing (another runs the job
  again after the lease, the stream says restart, a follower ends with the text
  of an uninterrupted greedy run and no token twice); SIGTERM then finishes the
  sequences in that other worker's slots and exits 0.

The kill test kills the module's worker; it runs last (file order), and a test
after it would start a new one (``Live.worker``). A stream that outlives its
killed worker through `sluice up` is tests/process/generate/test_up_chat.py's."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
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
from sluice.generate.prompt import PromptCodec
from sluice.generate.stream import Follower, read_stream_sync
from sluice.generate.tiny import resolve_tokenizer_dir
from sluice.jobs import JobStatus
from sluice.local.children import Child
from sluice.local.redis_server import RedisServer
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.records import Stat, StreamEvent
from tests.conftest import flush
from tests.kit.genworkers import MODEL, Workers, tiny_config
from tests.kit.http import HTTP
from tests.kit.served import served
from tests.waits import wait_until

pytestmark = [pytest.mark.system]
READY_S = 120.0  # a cold worker imports torch and transformers on a loaded machine
PROMPT = "the worker kept the stream going while the other one"
MAX_TOKENS = 160
# A look every 50 ms, not 10: the waits span a cold worker's start (~10 s), and a
# 160-token run still has well over 8 tokens to go when the first 8 are seen.
POLL_S = 0.05


@dataclass
class Live:
    """The module's stack: its workers, the gateway's URL, a client on its Redis."""

    w: Workers
    path: Path
    cfg: SluiceConfig
    base: str
    r: redis.Redis
    current: list[Child] = field(default_factory=list)

    def worker(self) -> Child:
        """The module's worker, started again if a test before killed it."""
        if not self.current or not self.current[-1].alive():
            self.current.append(self.w.spawn(f"w{len(self.current) + 1}", self.path))
        return self.current[-1]

    def queue(self) -> QueueClient:
        return QueueClient(self.r, dict(self.cfg.models))


@pytest.fixture(scope="module")
def live(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A worker (started, not yet ready) and the gateway, on a Redis flushed once
    for the module: no test here takes the flushing ``redis_url`` or ``r``."""
    flush(redis_server)
    w = Workers(tmp_path_factory.mktemp("live"), redis_server.url)
    raw = tiny_config(lease_s=1.5, slots=4)
    # Accepted before the worker is ready: the first requests wait in the queue.
    raw["models"][MODEL]["autoscaling"] = {"min_replicas": 0}
    path, cfg = w.config(raw)
    r = connect(redis_server.url)
    try:
        with served(create_app(cfg, redis_server.url), log_level="warning") as port:
            live = Live(w, path, cfg, f"http://127.0.0.1:{port}", r)
            live.worker()
            yield live
    finally:
        w.stop()
        r.close()


def test_the_observer_reads_a_live_generative_worker(live: Live) -> None:
    live.worker()
    qc, cfg = live.queue(), live.cfg
    # The expected output is the mean over every finished job: here, first in the
    # module, these six alone (the counters before them count any test's before).
    before = qc.stats(MODEL).counters
    n0 = int(before.get(Stat.GEN_FINISHED, 0) or 0)
    t0 = int(before.get(Stat.GEN_OUTPUT_TOKENS, 0) or 0)
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
    assert g.expected_output_tokens == pytest.approx((t0 + sum(outputs)) / (n0 + len(outputs)))
    assert any((x.tokens_per_s or 0) > 0 for x in seen)  # heartbeat tokens/s
    d = decide(cfg.model(MODEL).autoscaling, snap.observation, PolicyState(), 0.0)
    assert entry(d, snap.observation, 1).ttft_p99_ms == g.ttft_p99_ms


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(api_key="unused", base_url=f"{base}/v1", max_retries=0, timeout=READY_S)


def job_result(base: str, reply_id: str) -> dict[str, Any]:
    job_id = reply_id.split("-", 1)[1]
    return dict(HTTP.get(f"{base}/v1/jobs/{job_id}").json()["result"])


def test_completions_streams_and_sse_against_a_real_worker(live: Live) -> None:
    live.worker()
    base = live.base
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


class Reader:
    """A client following one job's stream: the deltas it was shown, in order."""

    def __init__(self, r: redis.Redis, job: str) -> None:
        self.r, self.job = r, job
        self.follower, self.after = Follower(), "0-0"
        self.shown: list[int] = []
        self.types: list[StreamEvent] = []

    def poll(self) -> int:
        for entry_ in read_stream_sync(self.r, MODEL, self.job, self.after):
            self.after = entry_.id
            self.types.append(entry_.type)
            for d in self.follower.feed(entry_):
                assert d.index == len(self.shown)  # each delta where the last one ended
                self.shown += d.token_ids
        return len(self.shown)


def submit(qc: QueueClient, cfg: Any, ids: list[int]) -> str:
    job = new_job(cfg.model(MODEL), ids, max_tokens=MAX_TOKENS, temperature=0.0)
    return qc.submit(MODEL, [job])[0].id


def done(qc: QueueClient, job: str) -> bool:
    return qc.get(job).status == JobStatus.SUCCEEDED


def test_a_killed_workers_job_runs_again_and_sigterm_then_drains_its_successor(
    live: Live,
) -> None:
    """The module's worker killed mid-generation, a second worker (its own config:
    2 slots, 5 s leases) takes the job over, and SIGTERM then drains it."""
    qc = live.queue()
    ids = PromptCodec.load(resolve_tokenizer_dir("tiny:4x256")).encode(PROMPT)
    second_path, _ = live.w.config(tiny_config(lease_s=5, slots=2), "second.yaml")
    second = killed_mid_generation(live, qc, ids, second_path)
    sigterm_finishes_the_sequences_in_slots_and_exits_0(live, qc, ids, second)


def killed_mid_generation(live: Live, qc: QueueClient, ids: list[int], second_path: Path) -> Child:
    """A worker killed mid-generation loses nothing and no token shows twice: the
    second worker (returned) runs the job again after the lease."""
    r, cfg, w = live.r, live.cfg, live.w
    first = live.worker()
    job = submit(qc, cfg, ids)
    reader = Reader(r, job)
    wait_until(lambda: reader.poll() >= 8, READY_S, "the first worker's tokens", POLL_S)
    first.proc.kill()  # SIGKILL mid-generation: no drain, no hand-back
    first.proc.wait(10)
    before = reader.poll()
    assert not done(qc, job) and before < MAX_TOKENS
    second = w.spawn("successor", second_path)
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
    live: Live, qc: QueueClient, ids: list[int], worker: Child
) -> None:
    """SIGTERM finishes the sequences in the worker's two slots and exits 0; a job
    queued meanwhile is claimed by no one."""
    jobs = [submit(qc, live.cfg, ids) for _ in range(2)]
    readers = [Reader(live.r, j) for j in jobs]
    wait_until(lambda: all(x.poll() >= 4 for x in readers), READY_S, "both streaming", POLL_S)
    queued = submit(qc, live.cfg, ids)
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(60) == 0, live.w.log(worker)
    for job in jobs:  # finished where they ran: nothing lost, nothing run twice
        rec = qc.get(job)
        assert rec.status == JobStatus.SUCCEEDED and rec.attempts == 1
    assert qc.get(queued).status == JobStatus.QUEUED  # claimed by no one
    qc.cancel(queued)  # not left for a worker a later test would start
