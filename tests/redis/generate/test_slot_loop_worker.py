"""The generative worker in a thread (a fake engine, a real Redis): it serves
through the slot loop with the batch worker's lifecycle: heartbeat with its slots,
a drain that finishes its sequences, a parked worker that claims nothing, an idle
worker that blocks on the wake list (ADR 0147)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from sluice import keys, registry
from sluice.generate.params import GenerateInput, SamplingParams
from sluice.jobs import JobStatus, NewJob
from sluice.queue import QueueClient
from sluice.records import StreamEvent, StreamField
from tests.kit.http import HTTP
from tests.waits import blocked_clients, wait_blocked, wait_until

MODEL = "gen"
Start = Callable[..., Any]  # the gen_worker fixture


def submit(qc: QueueClient, prompt: tuple[int, ...], max_tokens: int) -> str:
    value = GenerateInput(prompt, SamplingParams(max_tokens, temperature=0.0)).to_dict()
    return qc.submit(MODEL, [NewJob(value, "256", len(prompt) + max_tokens)])[0].id


def status(qc: QueueClient, job: str) -> JobStatus:
    return qc.get(job).status


def streamed(r: redis.Redis, job: str) -> int:
    entries: Any = r.xrange(keys.stream_key(MODEL, job))
    return sum(f[StreamField.TYPE] == StreamEvent.TOKENS for _, f in entries)


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


def test_the_metrics_port_serves_the_generate_metrics(
    r: redis.Redis, gen_worker: Start, gen_config: Callable[..., Any]
) -> None:
    cfg = gen_config()
    qc = QueueClient(r, dict(cfg.models))
    run = gen_worker(cfg, metrics_port=0)
    job = submit(qc, (1,), 6)
    wait_until(lambda: status(qc, job) == JobStatus.SUCCEEDED)
    port = wait_until(lambda: run.worker.status.snapshot().metrics_port)
    text = HTTP.get(f"http://127.0.0.1:{port}/metrics").text
    for name in (
        'sluice_generate_tokens_total{model="gen"} 6.0',
        'sluice_generate_slots{model="gen"} 4.0',
        'sluice_generate_ttft_seconds_count{model="gen"} 1.0',
        'sluice_generate_sequences_total{model="gen",reason="length"} 1.0',
        "sluice_generate_step_seconds_bucket",
        "sluice_generate_inter_token_seconds_bucket",
        "sluice_generate_round_trip_seconds_bucket",
        "sluice_generate_slot_occupancy",
        "sluice_generate_tokens_per_second",
        'sluice_worker_state{model="gen",state="ready"} 1.0',
    ):
        assert name in text, name


def test_build_worker_picks_the_slot_loop_for_a_generate_section(redis_url: str) -> None:
    from sluice.config import parse_config
    from sluice.errors import ConfigError
    from workers.generate.worker import GenerativeWorker
    from workers.main import build_worker
    from workers.worker import WorkerOptions

    def config(handler: str, generate: bool) -> Any:
        model: dict[str, Any] = {"handler": handler, "params": {"model": "tiny:4x256"}}
        if generate:
            model["generate"] = {"slots": 2}
        return parse_config({"models": {MODEL: model}})

    opts = WorkerOptions(model=MODEL, metrics_port=-1)
    worker = build_worker(config("causal-lm", True), redis_url, opts, "cpu")
    try:
        assert isinstance(worker, GenerativeWorker) and worker.status.snapshot().slots == 2
        assert not worker.overlap  # no prefetch thread: the loop claims in its round trip
    finally:
        worker.client.redis.close()
    # refused when the config loads, before any worker is built
    with pytest.raises(ConfigError, match="handler 'synthetic' makes no tokens"):
        config("synthetic", True)
    with pytest.raises(ConfigError, match="needs a generate: section"):
        config("causal-lm", False)


def test_a_burst_worker_exits_0_once_the_queue_is_empty(
    r: redis.Redis, gen_worker: Start, gen_config: Callable[..., Any]
) -> None:
    cfg = gen_config(slots=2)
    qc = QueueClient(r, dict(cfg.models))
    jobs = [submit(qc, (i,), 5 + i) for i in range(1, 6)]
    run = gen_worker(cfg, burst=True)
    assert run.join() == 0
    assert all(status(qc, j) == JobStatus.SUCCEEDED for j in jobs)
