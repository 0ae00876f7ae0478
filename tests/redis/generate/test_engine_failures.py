"""Engine failures in the slot loop on a real Redis (ADR 0147): a vLLM engine whose
core dies gives its jobs back to be retried (never fails them outright) and every
later claim counts as an engine failure (the worker's streak quarantines it), and
one sequence's engine error is retried, an attempt used, not dead-lettered."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import redis

from sluice.generate.params import GenerateInput, SamplingParams
from sluice.generate.stream import Follower, read_stream_sync
from sluice.jobs import JobStatus, NewJob
from sluice.queue import QueueClient
from sluice.records import StreamEvent, StreamField
from tests.waits import wait_until
from workers.generate.engine import StepOutput
from workers.generate.loop import SlotLoop
from workers.generate.vllm_engine import VLLMEngine, VLLMOptions
from workers.worker import EXIT_QUARANTINED

Make = Callable[..., Any]
MODEL = "gen"


@dataclass
class TinyCore:
    """vLLM's LLMEngine as the adapter uses it: one token a step per request (text
    ``<id>``), finished at max_tokens; ``broken``: step raises (the core died)."""

    live: dict[str, list[int]] = field(default_factory=dict)
    limit: dict[str, int] = field(default_factory=dict)
    broken: bool = False

    def add_request(self, request_id: str, prompt: Any, params: Any) -> str:
        self.live[request_id] = []
        self.limit[request_id] = params["max_tokens"]
        return request_id

    def abort_request(self, request_ids: list[str], internal: bool = False) -> None:
        for rid in request_ids:
            self.live.pop(rid, None)

    def step(self) -> list[Any]:
        if self.broken:
            raise RuntimeError("CUDA error: an illegal memory access")
        outs = []
        for rid, made in list(self.live.items()):
            made.append(len(made) + 1)
            done = len(made) >= self.limit[rid]
            if done:
                del self.live[rid]
            comp = SimpleNamespace(
                token_ids=[made[-1]],
                text=f"<{made[-1]}>",
                finish_reason="length" if done else None,
                stop_reason=None,
            )
            outs.append(SimpleNamespace(request_id=rid, outputs=[comp], finished=done))
        return outs


def vllm_loop(g: Any, core: TinyCore) -> SlotLoop:
    opts = VLLMOptions(slots=2, max_seq_tokens=256, prefill_tokens_per_step=8)
    engine = VLLMEngine("m", opts, opener=lambda d, o: (core, dict, "DELTA"))
    gcfg = g.cfg.model(MODEL).generate
    return SlotLoop(engine, g.qc, MODEL, "w1", gcfg)


def test_a_dead_vllm_core_retries_its_jobs_and_counts_every_later_claim(gen: Make) -> None:
    g = gen(slots=2)
    core = TinyCore()
    g.loop = vllm_loop(g, core)
    a = g.submit((1, 2), 20)
    g.loop.turn()
    g.loop.turn()
    assert g.qc.get(a).status == JobStatus.RUNNING
    core.broken = True
    turn = g.loop.turn()
    assert turn.engine_failed and g.loop.active == 0
    rec = g.qc.get(a)
    assert rec.status == JobStatus.QUEUED, "retried, not failed"
    assert rec.attempts == 1  # the failed run used its attempt
    core.broken = False  # a dead engine stays dead
    turns = [g.loop.turn() for _ in range(6)]
    claimed = [t for t in turns if t.claimed]
    assert claimed, "the job is claimed again"
    assert all(t.engine_failed for t in claimed), "a claim into a dead engine is an engine failure"
    rec = g.qc.get(a)
    assert rec.status == JobStatus.QUEUED
    assert rec.attempts == 1, "a job the dead engine never ran is released, its attempt undone"


@dataclass
class ErrorOnce:
    """Wraps the fixture's fake engine: the first step that produces a token for
    ``victim`` ends it with an engine error instead."""

    inner: Any
    victim: str = ""
    fired: bool = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def step(self) -> list[StepOutput]:
        outs = self.inner.step()
        if self.fired:
            return outs
        for k, o in enumerate(outs):
            if o.seq_id == self.victim:
                self.fired = True
                self.inner.abort(o.seq_id)
                outs[k] = StepOutput(o.seq_id, (), "", "error", "vLLM ended the sequence: error")
        return outs


def test_one_sequences_engine_error_is_retried_then_succeeds(gen: Make) -> None:
    g = gen(slots=2)
    job = g.submit((5, 6, 7), 4)
    engine = ErrorOnce(g.engine, victim=job)
    gcfg = g.cfg.model(MODEL).generate
    g.loop = SlotLoop(engine, g.qc, MODEL, "w1", gcfg)  # type: ignore[arg-type]
    g.until_idle()
    rec = g.qc.get(job)
    assert engine.fired
    assert rec.status == JobStatus.SUCCEEDED, rec.error
    assert rec.attempts == 2 and rec.result["attempt"] == 2
    assert rec.result["text"] == g.expected((5, 6, 7), 4)
    types = [e[StreamField.TYPE] for e in g.entries(job)]
    assert StreamEvent.ERROR not in types, "a retried run writes no error entry"
    assert StreamEvent.RESTART in types
    follower = Follower()
    for entry in read_stream_sync(g.qc.redis, MODEL, job):
        follower.feed(entry)
    assert follower.done and follower.text == rec.result["text"]


def test_a_worker_over_a_dead_engine_is_quarantined_and_loses_no_job(
    gen_worker: Callable[..., Any], gen_config: Callable[..., Any], r: redis.Redis
) -> None:
    cfg = gen_config(slots=2)
    wcfg = cfg.worker.model_copy(update={"quarantine_after_failures": 3, "quarantine_grace_s": 0})
    cfg = cfg.model_copy(update={"worker": wcfg})
    qc = QueueClient(r, dict(cfg.models))
    params = GenerateInput((1, 2), SamplingParams(50, temperature=0.0)).to_dict()
    [job] = [s.id for s in qc.submit(MODEL, [NewJob(params, "256", 52)])]
    run = gen_worker(cfg, delay_s=0.01)
    # In the engine, not only claimed: a claim the engine refuses at its add is
    # given back with no attempt used, which is the other case below.
    wait_until(
        lambda: job in getattr(run.worker.engine_handler.engine, "seqs", ()),
        what="the job is in the engine",
    )
    assert qc.get(job).status == JobStatus.RUNNING
    run.engine.dead = True  # its next step raises, and every add after
    assert run.join() == EXIT_QUARANTINED
    rec = qc.get(job)
    assert rec.status == JobStatus.QUEUED, "given back, never failed"
    assert rec.attempts == 1, "the run that died used one attempt; the refused claims none"
