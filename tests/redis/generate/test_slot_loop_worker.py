"""The generative worker in a thread (a fake engine, a real Redis): it serves
through the slot loop with the batch worker's lifecycle: heartbeat with its slots,
a drain that finishes its sequences, a parked worker that claims nothing, an idle
worker that blocks on the wake list (ADR 0147)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from sluice import registry
from sluice.generate.params import GenerateInput, SamplingParams
from sluice.jobs import JobStatus, NewJob
from sluice.queue import QueueClient
from sluice.records import StreamEvent, StreamField
from tests.waits import blocked_clients, wait_blocked, wait_until

MODEL = "gen"
Start = Callable[..., Any]  # the gen_worker fixture


def submit(qc: QueueClient, prompt: tuple[int, ...], max_tokens: int) -> str:
    value = GenerateInput(prompt, SamplingParams(max_tokens, temperature=0.0)).to_dict()
    return qc.submit(MODEL, [NewJob(value, "256", len(prompt) + max_tokens)])[0].id


def status(qc: QueueClient, job: str) -> JobStatus:
    return qc.get(job).status


def streamed(r: redis.Redis, job: str) -> int:
    from sluice import keys

    entries = r.xrange(keys.stream_key(MODEL, job))
    return sum(1 for _, f in entries if f[StreamField.TYPE] == StreamEvent.TOKENS)


def test_the_worker_serves_and_its_heartbeat_shows_its_slots(
    r: redis.Redis, gen_worker: Start, gen_config: Callable[..., Any]
) -> None:
    cfg = gen_config(slots=3)
    qc = QueueClient(r, dict(cfg.models))
    run = gen_worker(cfg, delay_s=0.01)
    jobs = [submit(qc, (i,), 30) for i in range(1, 6)]

    def busy_heartbeat() -> Any:
        workers = qc.run(registry.list_workers_call(MODEL))[0]
        return workers and workers[0].slots_busy == 3 and workers[0]

    info = wait_until(busy_heartbeat, what="a heartbeat with 3 busy slots")
    assert info.slots == 3 and info.busy and info.state == "ready"
    wait_until(lambda: all(status(qc, j) == JobStatus.SUCCEEDED for j in jobs))
    wait_until(lambda: run.worker.status.snapshot().jobs == 5, what="5 jobs counted")


def test_a_drain_finishes_the_sequences_in_slots_and_claims_nothing_more(
    r: redis.Redis, gen_worker: Start, gen_config: Callable[..., Any]
) -> None:
    cfg = gen_config(slots=2)
    qc = QueueClient(r, dict(cfg.models))
    run = gen_worker(cfg, delay_s=0.01)
    held = [submit(qc, (i,), 40) for i in (1, 2)]
    wait_until(lambda: all(streamed(r, j) > 2 for j in held), what="both streaming")
    waiting = submit(qc, (3,), 5)
    run.worker.drain("test")
    assert run.join() == 0
    for job in held:  # finished, not abandoned: nothing to run again
        rec = qc.get(job)
        assert rec.status == JobStatus.SUCCEEDED and rec.attempts == 1
        assert len(rec.result["token_ids"]) == 40
    assert status(qc, waiting) == JobStatus.QUEUED


def test_a_parked_worker_has_its_engine_loaded_and_claims_nothing(
    r: redis.Redis, gen_worker: Start, gen_config: Callable[..., Any]
) -> None:
    cfg = gen_config()
    qc = QueueClient(r, dict(cfg.models))
    run = gen_worker(cfg, parked=True)
    job = submit(qc, (1,), 3)
    wait_until(lambda: run.worker.status.state == "standby", what="standby")
    assert run.worker.engine_handler.engine is not None  # loaded and warmed up
    warm_steps = run.engine.steps
    assert warm_steps > 0
    assert status(qc, job) == JobStatus.QUEUED
    run.worker.control.on_command(registry.PROMOTE)
    wait_until(lambda: status(qc, job) == JobStatus.SUCCEEDED, what="served once promoted")


def test_an_idle_worker_blocks_on_the_wake_list_between_turns(
    r: redis.Redis, gen_worker: Start, gen_config: Callable[..., Any]
) -> None:
    cfg = gen_config()
    qc = QueueClient(r, dict(cfg.models))
    before = blocked_clients(r)
    run = gen_worker(cfg)
    wait_blocked(r, before)
    events: list[str] = []
    loop, worker = run.worker.slots, run.worker
    turn, wait = loop.turn, worker.client.wait_for_work

    def counted_turn(*a: Any, **kw: Any) -> Any:
        t = turn(*a, **kw)
        events.append("idle" if t.idle else "busy")
        return t

    def counted_wait(*a: Any, **kw: Any) -> Any:
        events.append("wait")
        return wait(*a, **kw)

    loop.turn = counted_turn
    worker.client.wait_for_work = counted_wait  # type: ignore[method-assign]
    wait_until(lambda: events.count("idle") >= 3, what="three idle turns")
    idle = [i for i, e in enumerate(events[:-1]) if e == "idle"]
    assert all(events[i + 1] == "wait" for i in idle), events  # never turn after turn
    job = submit(qc, (2,), 4)  # the submit's wake token ends the wait
    wait_until(lambda: status(qc, job) == JobStatus.SUCCEEDED, what="woken and served")
