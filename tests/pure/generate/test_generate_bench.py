"""``sluice bench generate``'s parts that decide its figures, without a model or a
server: the workload, the SSE fold, the summary's windows and gaps, the ratios and
targets, the in-process driver over a fake engine, process roles and the table."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Sequence
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from sluice.generate.params import SamplingParams
from sluicebench.generate import inproc, report, stats, systems
from sluicebench.generate.client import LoopResult, Target, Trace, parse_event
from sluicebench.generate.workload import (
    MAX_TOKENS_MIX,
    MIN_ARRIVALS,
    RESERVED_IDS,
    Request,
    arrivals,
    canonical,
    mean_output_tokens,
    parse_mix,
    requests,
)
from tests.conftest import budget
from workers.generate.engine import StepOutput


def test_the_workload_is_seeded_and_mixed_as_the_issue_says() -> None:
    reqs = requests(2000, 1, 8192)
    assert reqs == requests(2000, 1, 8192) and reqs != requests(2000, 2, 8192)
    share = Counter(r.max_tokens for r in reqs)
    for n, weight in MAX_TOKENS_MIX:
        assert abs(share[n] / 2000 - weight) < 0.04
    assert all(16 <= len(r.prompt_ids) <= 256 for r in reqs)
    assert all(RESERVED_IDS <= t < 8192 for r in reqs for t in r.prompt_ids)
    assert mean_output_tokens() == 0.5 * 16 + 0.3 * 64 + 0.2 * 256


@given(rate=st.floats(0.5, 50), duration=st.floats(0.5, 20), limit=st.integers(0, 200))
@budget(0.2)
def test_arrivals_are_ordered_bounded_in_time_and_count(
    rate: float, duration: float, limit: int
) -> None:
    at = arrivals(rate, duration, 1, limit)
    assert at == sorted(at) and len(at) <= limit
    assert all(0 < t < max(duration, MIN_ARRIVALS / rate) for t in at)


def test_poisson_arrivals_come_at_about_the_rate() -> None:
    assert 900 < len(arrivals(10.0, 100.0, 3, 10_000)) < 1100
    assert len(arrivals(0.1, 1.0, 3, 10_000)) > 5  # a low rate runs longer instead


def test_sse_events_fold_into_the_trace() -> None:
    t = Trace(1, 3, sent_s=0.0)
    assert not parse_event('{"choices": [{"index": 0, "text": "a"}]}', t, 1.0)
    assert not parse_event('{"choices": [{"text": "bc", "token_ids": [5, 6]}]}', t, 2.0)
    assert not parse_event('{"choices": [{"text": ""}]}', t, 2.5)  # held back: no token
    assert not parse_event('{"choices": [], "usage": {"completion_tokens": 3}}', t, 3.0)
    assert parse_event("[DONE]", t, 3.0)
    assert t.chunks == [(1.0, 1), (2.0, 2)] and t.tokens == 3 and t.error is None
    bad = Trace(2, 3, 0.0)
    assert parse_event('{"error": {"message": "no"}}', bad, 1.0) and "no" in (bad.error or "")


def test_the_request_body_asks_for_a_greedy_stream_of_exactly_max_tokens() -> None:
    req = Request(1, (20, 21), 16, "hello there")
    body = Target("http://x", "tiny").body(req)
    assert body["stream"] is True and body["temperature"] == 0.0 and body["max_tokens"] == 16
    assert "stop" not in body and body["prompt"] == "hello there"
    assert Target("http://x", "tiny", prompt_as_ids=True).body(req)["prompt"] == [20, 21]


class MergingCodec:
    """A tokenizer that merges each pair "1 1" into 11 (as BPE merges across ids)."""

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join("1 1" if i == 11 else str(i) for i in ids)

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for word in text.split():
            if word == "1" and out and out[-1] == 1:
                out[-1] = 11
            else:
                out.append(int(word))
        return out


def test_prompts_become_their_text_s_own_encoding_no_longer_than_drawn() -> None:
    reqs = [Request(0, (1, 1, 5, 11, 7), 16), Request(1, (11, 11, 11), 64)]
    codec = MergingCodec()
    for before, after in zip(reqs, canonical(reqs, codec), strict=True):
        assert codec.encode(after.text) == list(after.prompt_ids)
        assert len(after.prompt_ids) <= len(before.prompt_ids)
        assert after.max_tokens == before.max_tokens and after.rid == before.rid
    assert canonical(reqs, codec)[0].prompt_ids == (11, 5, 11, 7)


def _trace(rid: int, sent: float, chunks: Sequence[tuple[float, int]], max_tokens: int) -> Trace:
    return Trace(rid, max_tokens, sent, list(chunks), done_s=chunks[-1][0] if chunks else sent)


def test_the_summary_counts_tokens_in_the_window_and_spreads_bunched_gaps() -> None:
    traces = [
        _trace(0, 0.0, [(0.1, 1), (0.2, 1), (0.5, 3)], 5),  # 3 tokens after 0.3 s: 0.1 each
        _trace(1, 1.0, [(1.5, 1), (1.6, 1)], 4),  # short: 2 of 4
        Trace(2, 4, 0.0, error="HTTP 500"),
    ]
    out = stats.summarize(LoopResult(100.0, (0.15, 1.55), [_shift(t, 100.0) for t in traces], 2.0))
    assert out["requests"] == 3 and out["errors"] == 1 and out["short"] == 1
    assert out["output_tokens"] == 7
    assert out["tokens_per_s"] == round(5 / 1.4, 1)  # 0.2 (1) + 0.5 (3) + 1.5 (1)
    assert out["ttft_p50_ms"] == 300.0  # 100 ms and 500 ms
    assert out["itl_p50_ms"] == 100.0 and out["itl_p99_ms"] == 100.0


def _shift(t: Trace, by: float) -> Trace:
    return Trace(
        t.rid,
        t.max_tokens,
        t.sent_s + by,
        [(a + by, n) for a, n in t.chunks],
        None if t.done_s is None or t.error else t.done_s + by,
        t.usage_tokens,
        t.error,
    )


def _system(tps: float | None, **open_: Any) -> dict[str, Any]:
    return {"closed": {"tokens_per_s": tps}, "open": open_}


def test_ratios_and_targets_compare_within_the_run_and_skip_what_did_not_run() -> None:
    results = {
        "a": _system(900.0, ttft_p99_ms=250.0, itl_p99_ms=40.0, itl_p50_ms=12.0),
        "b": _system(300.0),
        "c": {"skipped": "no venv"},
        "e": _system(1000.0, median_step_ms=10.0),
    }
    r = stats.ratios(results)
    assert r == {"a_over_b": 3.0, "a_over_c": None, "a_over_d": None, "a_over_e": 0.9}
    verdicts = {t["target"]: t["verdict"] for t in stats.targets(results)}
    assert verdicts == {
        "(a) tokens/s >= 2x (b)": "PASS",
        "(a) tokens/s >= 2x (c)": "n/a",
        "(a) tokens/s >= 0.8x (e)": "PASS",
        "(a) open TTFT p99 <= 300 ms": "PASS",
        "(a) open inter-token p99 <= 3x median step": "MISS",  # 40 / 10 ms
    }


def test_the_step_falls_back_to_a_s_own_median_gap_without_e() -> None:
    step, source = stats.median_step_ms({"a": _system(1.0, itl_p50_ms=12.0)})
    assert step == 12.0 and "(a)" in source
    assert stats.median_step_ms({})[0] is None


def test_the_open_rate_is_a_fraction_of_capacity_in_requests() -> None:
    reqs = requests(100, 1, 1000)
    mean = sum(r.max_tokens for r in reqs) / 100
    assert stats.open_rate(1000.0, reqs, 0.7) == round(1000 / mean * 0.7, 3)
    assert stats.open_rate(None, reqs, 0.7) == 0.0


class FakeEngine:
    """One token per active sequence per step; ends at max_tokens."""

    slots = 2

    def __init__(self) -> None:
        self.seqs: dict[str, list[int]] = {}
        self.admitted: list[str] = []

    def add(self, seq_id: str, prompt_ids: Sequence[int], params: SamplingParams) -> None:
        assert len(self.seqs) < self.slots and params.greedy
        self.seqs[seq_id] = [0, params.max_tokens]
        self.admitted.append(seq_id)

    def step(self) -> list[StepOutput]:
        out = []
        for sid, seq in list(self.seqs.items()):
            seq[0] += 1
            done = seq[0] == seq[1]
            out.append(StepOutput(sid, (7,), "x", "length" if done else None))
            if done:
                del self.seqs[sid]
        return out

    def active(self) -> int:
        return len(self.seqs)


def test_the_in_process_driver_fills_free_slots_each_step() -> None:
    engine = FakeEngine()
    reqs = requests(6, 1, 100)
    d = inproc.Driver(engine, SamplingParams)
    loop = inproc.closed(d, reqs, concurrency=3, duration_s=1e9, warm_s=0.0)
    assert sorted(t.rid for t in loop.traces) == list(range(6))
    assert all(t.ok and t.tokens == t.max_tokens for t in loop.traces)
    assert engine.admitted == [str(r.rid) for r in reqs]  # in order, two at a time
    assert len(d.step_s) == _steps_for(reqs, slots=2)


def _steps_for(reqs: Sequence[Any], slots: int) -> int:
    """Steps of a 2-slot engine admitting in order into any free slot."""
    free_at = [0] * slots
    for r in reqs:
        i = free_at.index(min(free_at))
        free_at[i] += r.max_tokens
    return max(free_at)


def test_the_in_process_open_loop_serves_every_arrival() -> None:
    reqs = requests(4, 2, 100)
    d = inproc.Driver(FakeEngine(), SamplingParams)
    loop = inproc.opened(d, reqs, [0.0, 0.001, 0.002, 0.003])
    assert len(loop.traces) == 4 and all(t.tokens == t.max_tokens for t in loop.traces)


def test_processes_are_grouped_by_role() -> None:
    py = "/venv/bin/python"
    assert systems.role_of([py, "-m", "sluice", "gateway", "--port", "1"]) == "gateway"
    assert systems.role_of([py, "-m", "sluice", "worker", "--model", "tiny"]) == "worker"
    assert systems.role_of([py, "-m", "sluice", "up", "--config", "x"]) == "sluice up"
    assert systems.role_of(["/usr/bin/redis-server", "*:6379"]) == "redis"
    assert systems.role_of([py, "-m", "sluice", "bulk", "worker"]) == "bulk"
    assert systems.role_of(["ray::ServeReplica:generate:Completions"]) == "ray replica"
    assert systems.role_of(["/venv/lib/ray/core/src/ray/raylet/raylet", "--x"]) == "raylet"
    assert systems.role_of([py, "/repo/sluicebench/generate/ray_app.py", "d"]) == "ray driver"


def test_the_bench_config_names_the_admission_and_one_thread() -> None:
    text = systems.sluice_config(systems.Path("/m"), "whole_batch", 32, 1)
    assert "admission: whole_batch" in text and "threads: 1" in text and "slots: 32" in text


def test_a_missing_peer_venv_is_skipped_with_the_reason(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(systems, "RAY_VENV", tmp_path / "nope")
    try:
        systems.start("c", tmp_path, 4, 1, tmp_path)
    except systems.Skipped as e:
        assert "make bench-peers" in str(e)
    else:
        raise AssertionError("no Skipped")


def test_the_table_shows_every_system_and_the_verdicts() -> None:
    ph = {
        "tokens_per_s": 900.0,
        "ttft_p50_ms": 20.0,
        "ttft_p99_ms": 90.0,
        "itl_p50_ms": 10.0,
        "itl_p99_ms": 25.0,
        "requests": 50,
        "errors": 0,
        "short": 0,
        "cpu": {"worker": {"procs": 1, "cpu_s": 9.5}},
    }
    results = {
        "a": systems.describe("a") | {"closed": ph, "open": ph},
        "c": systems.describe("c") | {"skipped": "no venv"},
    }
    data = {
        "params": {
            "model": "tiny:2x64",
            "slots": 4,
            "concurrency": 8,
            "duration_s": 3.0,
            "open_s": 2.0,
        },
        "open_rate_rps": 1.5,
        "systems": results,
        "targets": stats.targets(results),
    }
    out = io.StringIO()
    report.render(data, Console(file=out, width=200))
    text = out.getvalue()
    assert "(a) sluice continuous" in text and "skipped" in text and "no venv" in text
    assert "worker 9.5" in text and "n/a" in text


def test_the_mix_parses_and_refuses_nonsense() -> None:
    assert parse_mix("16:0.5,64:0.3,256:0.2") == MAX_TOKENS_MIX
    assert parse_mix("8") == ((8, 1.0),)
    for bad in ("0:1", "16:0", "x:1", ""):
        try:
            parse_mix(bad)
        except ValueError:
            continue
        raise AssertionError(bad)


def test_tokens_per_cpu_second_count_every_process_of_the_system() -> None:
    cpu = {"worker": {"procs": 1, "cpu_s": 8.0}, "gateway": {"procs": 1, "cpu_s": 2.0}}
    out = stats.with_cpu({"output_tokens": 500}, cpu)
    assert out["cpu_s"] == 10.0 and out["tokens_per_cpu_s"] == 50.0 and out["cpu"] == cpu
    assert stats.with_cpu({"output_tokens": 5}, {})["tokens_per_cpu_s"] is None
