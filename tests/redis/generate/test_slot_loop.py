"""The slot loop on a real Redis with a deterministic fake engine: tokens streamed,
continuous claim into the slot a step frees, whole-batch admission, cancel, lost
leases, malformed inputs, engine failures (ADR 0147)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sluice import keys
from sluice.generate.params import GenerateInput, SamplingParams
from sluice.generate.stream import Follower, read_stream_sync
from sluice.jobs import JobStatus
from sluice.records import JobField, StreamEvent, StreamField

Make = Callable[..., Any]  # the gen fixture: (slots, admission, lease_s, **loop kw) -> Gen
MODEL = "gen"


def tokens_of(entries: list[dict[str, str]]) -> list[dict[str, str]]:
    return [e for e in entries if e[StreamField.TYPE] == StreamEvent.TOKENS]


def test_a_claimed_job_streams_its_tokens_in_order_and_succeeds(gen: Make) -> None:
    g = gen()
    prompt = (5, 6, 7)
    job = g.submit(prompt, 6)
    g.until_idle()
    rec = g.qc.get(job)
    assert rec.status == JobStatus.SUCCEEDED
    assert rec.result["text"] == g.expected(prompt, 6)
    assert rec.result["finish_reason"] == "length"
    assert rec.result["attempt"] == 1
    assert rec.result["usage"] == {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}
    entries = g.entries(job)
    assert entries[0][StreamField.TYPE] == StreamEvent.START
    tokens = tokens_of(entries)
    assert [int(e[StreamField.INDEX]) for e in tokens] == list(range(6))
    assert "".join(e[StreamField.TEXT] for e in tokens) == g.expected(prompt, 6)
    ids = [i for e in tokens for i in json.loads(e[StreamField.IDS])]
    assert ids == list(rec.result["token_ids"])


def test_the_step_that_frees_a_slot_claims_into_it(gen: Make) -> None:
    g = gen(slots=2)
    short, long_ = g.submit((1,), 3), g.submit((2,), 40)
    g.loop.turn()  # claims both
    assert g.loop.active == 2
    waiting = g.submit((3,), 5)
    turns = []
    while g.qc.get(short).status != JobStatus.SUCCEEDED:
        turns.append(g.loop.turn())
        assert len(turns) < 50
    # The round trip that completed the short job claimed the waiting one into its slot.
    assert (turns[-1].ended, turns[-1].claimed) == (1, 1)
    assert g.qc.get(waiting).status == JobStatus.RUNNING
    assert g.qc.get(long_).status == JobStatus.RUNNING  # still decoding beside it
    g.until_idle()
    assert g.qc.get(waiting).result["text"] == g.expected((3,), 5)


def test_a_job_submitted_while_others_decode_starts_before_they_finish(gen: Make) -> None:
    g = gen(slots=4)
    running = [g.submit((i,), 30) for i in (1, 2)]
    for _ in range(3):
        g.loop.turn()
    late = g.submit((9,), 4)
    g.loop.turn()
    assert g.loop.active == 3
    g.until_idle()
    late_end = g.qc.get(late).finished_at_ms
    assert late_end is not None
    assert all(late_end <= (g.qc.get(j).finished_at_ms or 0) for j in running)


def test_whole_batch_admission_claims_only_once_every_slot_is_empty(gen: Make) -> None:
    g = gen(slots=2, admission="whole_batch")
    short, long_ = g.submit((1,), 2), g.submit((2,), 12)
    third = g.submit((3,), 2)
    g.loop.turn()
    assert g.loop.active == 2
    while True:
        turn = g.loop.turn()
        if g.qc.get(long_).status == JobStatus.SUCCEEDED:
            break
        assert turn.claimed == 0  # the freed slot stays empty until the batch drains
        assert g.qc.get(third).status == JobStatus.QUEUED
    assert g.qc.get(short).status == JobStatus.SUCCEEDED
    assert turn.claimed == 1  # the round trip that ended the batch claims the next
    g.until_idle()
    assert g.qc.get(third).status == JobStatus.SUCCEEDED


def test_a_cancel_stops_the_sequence_at_the_next_step_and_frees_its_slot(gen: Make) -> None:
    g = gen(slots=1)
    job = g.submit((1,), 100)
    g.loop.turn()
    g.loop.turn()
    waiting = g.submit((2,), 3)
    g.qc.cancel(job)
    steps = g.engine.steps
    turn = g.loop.turn()
    assert turn.lost == 1 and g.engine.aborted == [job]
    assert g.engine.steps == steps + 1  # one step, then the reply said cancelled
    assert g.loop.turn().claimed == 1  # its slot, at the next step
    g.until_idle()
    assert g.qc.get(job).status == JobStatus.CANCELLED
    assert g.qc.get(waiting).status == JobStatus.SUCCEEDED
    made = len(tokens_of(g.entries(job)))
    assert 1 <= made <= 3  # nothing streamed after the step that saw the cancel


def test_a_lost_lease_aborts_the_sequence_and_writes_nothing_more(gen: Make) -> None:
    g = gen()
    job = g.submit((1,), 100)
    g.loop.turn()
    g.loop.turn()
    # Another worker took the job (its lease lapsed and it was reclaimed).
    g.qc.redis.hset(keys.job_key(MODEL, job), JobField.WORKER, "w2")
    g.loop.turn()
    assert g.engine.aborted == [job] and g.loop.active == 0
    before = len(g.entries(job))
    g.until_idle()
    assert len(g.entries(job)) == before
    assert g.qc.get(job).status == JobStatus.RUNNING  # w2's now


def test_a_malformed_input_fails_its_job_with_a_clear_error(gen: Make) -> None:
    g = gen()
    bad = g.submit((1,), 4, input={"prompt": "not ids"})
    too_long = g.submit(tuple(range(1, 11)), 250)  # 10 + 250 above the fake's 256
    good = g.submit((3,), 4)
    g.until_idle()
    rec = g.qc.get(bad)
    assert rec.status == JobStatus.FAILED
    assert rec.error is not None and "invalid_input" in rec.error["message"]
    assert "prompt_ids" in rec.error["message"]
    rec = g.qc.get(too_long)
    assert rec.status == JobStatus.FAILED
    assert rec.error is not None and "max_seq_tokens" in rec.error["message"]
    assert g.qc.get(good).result["text"] == g.expected((3,), 4)


def test_an_engine_failure_retries_its_jobs_and_the_loop_goes_on(gen: Make) -> None:
    g = gen()
    job = g.submit((4,), 5)
    g.loop.turn()
    g.engine.fail_next_step = True
    turn = g.loop.turn()
    assert turn.engine_failed and g.loop.active == 0
    assert g.qc.get(job).status == JobStatus.QUEUED  # retried: another attempt
    g.until_idle()
    rec = g.qc.get(job)
    assert rec.status == JobStatus.SUCCEEDED and rec.attempts == 2
    assert rec.result["attempt"] == 2
    assert any(e[StreamField.TYPE] == StreamEvent.RESTART for e in g.entries(job))
    follower, shown = Follower(), []
    for entry in read_stream_sync(g.qc.redis, MODEL, job):
        shown += [i for d in follower.feed(entry) for i in d.token_ids]
    assert follower.done and follower.restarts == 1
    assert follower.text == g.expected((4,), 5)
    assert shown == list(rec.result["token_ids"])  # no token twice


def test_hand_back_releases_unstarted_and_retries_streamed_sequences(gen: Make) -> None:
    g = gen(slots=2)
    streamed = g.submit((4,), 50)
    g.loop.turn()
    g.loop.turn()
    g.loop.turn()
    unstarted = g.submit(tuple(range(1, 33)), 5)  # 4 prefill steps: no token yet
    g.loop.turn()
    assert g.loop.hand_back("test") == 2
    rec = g.qc.get(unstarted)
    assert rec.status == JobStatus.QUEUED and rec.attempts == 0  # released: no attempt used
    rec = g.qc.get(streamed)
    assert rec.status == JobStatus.QUEUED and rec.attempts == 1  # retried: RESTART next
    g.until_idle()
    rec = g.qc.get(streamed)
    assert rec.result["text"] == g.expected((4,), 50) and rec.result["attempt"] == 2
    assert any(e[StreamField.TYPE] == StreamEvent.RESTART for e in g.entries(streamed))
    assert g.qc.get(unstarted).result["attempt"] == 1


def test_each_turn_is_one_round_trip_to_redis(gen: Make) -> None:
    calls: list[str] = []
    g = gen(slots=3)
    real_pipeline, real_execute = g.qc.redis.pipeline, g.qc.redis.execute_command

    def pipeline(*a: Any, **kw: Any) -> Any:
        p = real_pipeline(*a, **kw)
        execute = p.execute

        def counted(*ea: Any, **ekw: Any) -> Any:
            calls.append("pipeline")
            return execute(*ea, **ekw)

        p.execute = counted  # type: ignore[method-assign]
        return p

    def command(*a: Any, **kw: Any) -> Any:
        calls.append(str(a[0]))
        return real_execute(*a, **kw)

    jobs = [g.submit((i,), 4 + i) for i in range(1, 6)]
    g.qc.redis.pipeline = pipeline  # type: ignore[method-assign]
    g.qc.redis.execute_command = command  # type: ignore[method-assign]
    turns = 0
    while not g.loop.turn().idle:
        turns += 1
        assert turns < 100
    sent = len(calls)
    assert all(g.qc.get(j).status == JobStatus.SUCCEEDED for j in jobs)
    assert turns > 5
    assert sent == turns + 1, calls  # one per turn (the last, idle, claimed nothing)


def test_the_heartbeat_and_metrics_see_the_slots(gen: Make) -> None:
    from prometheus_client import CollectorRegistry

    from sluice.registry import WorkerInfo
    from workers.generate.metrics import GenerateMetrics
    from workers.status import WorkerStatus

    reg = CollectorRegistry()
    status = WorkerStatus(WorkerInfo("w1", MODEL, "h", 1, "cpu", ["256"], "ready", 0.0))
    g = gen(slots=4, metrics=GenerateMetrics(MODEL, reg, 4), status=status)
    for i in range(3):
        g.submit((i + 1,), 20)
    g.loop.turn()
    g.loop.turn()
    info = status.snapshot()
    assert (info.slots, info.slots_busy) == (4, 3) and info.busy
    assert info.tokens_per_s > 0
    g.until_idle()
    info = status.snapshot()
    assert info.slots_busy == 0 and not info.busy

    def value(name: str, **labels: str) -> float:
        v = reg.get_sample_value(name, {"model": MODEL, **labels})
        assert v is not None, name
        return v

    assert value("sluice_generate_tokens_total") == 60
    assert value("sluice_generate_ttft_seconds_count") == 3
    assert value("sluice_generate_inter_token_seconds_count") == 57
    assert value("sluice_generate_sequences_total", reason="length") == 3
    assert value("sluice_generate_prompt_tokens_total") == 3
    assert value("sluice_generate_step_seconds_count", phase="decode") > 0
    assert value("sluice_generate_slots") == 4
    assert value("sluice_generate_slot_occupancy") == 0.0


def test_sampling_params_round_trip_through_the_job(gen: Make) -> None:
    g = gen()
    value = GenerateInput((1, 2), SamplingParams(3, temperature=0.0, stop=("x",))).to_dict()
    job = g.submit((1, 2), 3, input=value)
    g.until_idle()
    assert g.qc.get(job).result["text"] == g.expected((1, 2), 3)


def test_a_failed_round_trip_holds_the_engine_and_loses_no_token(gen: Make) -> None:
    from sluice.errors import RedisUnavailable
    from sluice.generate.ops import run_step

    failing = {"left": 0}

    def flaky(*a: Any, **kw: Any) -> Any:
        if failing["left"]:
            failing["left"] -= 1
            raise RedisUnavailable("connection lost")
        return run_step(*a, **kw)

    g = gen(step=flaky)
    job = g.submit((6,), 12)
    for _ in range(4):
        g.loop.turn()
    steps = g.engine.steps
    failing["left"] = 3
    for _ in range(3):
        turn = g.loop.turn()
        assert turn.error is not None and g.loop.busy
    assert g.engine.steps == steps + 1  # one step, then held until its tokens went out
    g.until_idle()
    rec = g.qc.get(job)
    assert rec.status == JobStatus.SUCCEEDED, (rec, g.entries(job))
    assert rec.result["text"] == g.expected((6,), 12)
    tokens = tokens_of(g.entries(job))
    assert [int(e[StreamField.INDEX]) for e in tokens] == list(range(12))  # no gap
