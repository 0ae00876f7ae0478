"""The slot table (workers/generate/slots.py) with a scripted engine: whatever way
an engine splits a sequence's output across steps (chunks, empty steps, tokens held
back), the appends are one per active sequence per step with contiguous offsets,
the first says the run started, and the result is exactly what was appended."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from sluice.generate.params import FinishReason, GenerateInput, SamplingParams
from sluice.jobs import ClaimedJob
from workers.generate.engine import StepOutput
from workers.generate.metrics import TokenRate
from workers.generate.slots import SlotTable


class ScriptedEngine:
    """Outputs scripted per sequence: a list of chunks, one per step ([] = a step
    without tokens); the last chunk finishes the sequence ("length")."""

    slots = 8

    def __init__(self) -> None:
        self.script: dict[str, list[list[int]]] = {}
        self.active_ids: list[str] = []

    def add(self, seq_id: str, prompt_ids: Sequence[int], params: SamplingParams) -> None:
        if params.max_tokens > 100:
            raise ValueError("max_tokens above this engine's budget")
        self.active_ids.append(seq_id)

    def abort(self, seq_id: str) -> None:
        self.active_ids.remove(seq_id)

    def step(self) -> list[StepOutput]:
        outs = []
        for sid in list(self.active_ids):
            chunks = self.script[sid]
            chunk = chunks.pop(0)
            done: FinishReason | None = "length" if not chunks else None
            if chunk or done:
                outs.append(StepOutput(sid, tuple(chunk), "".join(f"t{i} " for i in chunk), done))
            if done:
                self.active_ids.remove(sid)
        return outs

    def active(self) -> int:
        return len(self.active_ids)

    def close(self) -> None:
        pass


def job(job_id: str, value: object, attempts: int = 1) -> ClaimedJob:
    return ClaimedJob(job_id, value, 10, attempts, 0)


def valid_input(max_tokens: int = 10) -> dict[str, object]:
    return GenerateInput((1, 2), SamplingParams(max_tokens, temperature=0.0)).to_dict()


chunks = st.lists(st.lists(st.integers(0, 50), max_size=3), min_size=1, max_size=8)


@given(st.lists(chunks, min_size=1, max_size=4), st.integers(1, 3))
def test_appends_are_contiguous_and_the_result_is_what_was_appended(
    scripts: list[list[list[int]]], attempt: int
) -> None:
    engine = ScriptedEngine()
    table = SlotTable(engine)
    for i, script in enumerate(scripts):
        engine.script[f"j{i}"] = [list(c) for c in script]
        assert table.admit(job(f"j{i}", valid_input(), attempt), 0.0, 0.0) is None
    appended: dict[str, list[int]] = {f"j{i}": [] for i in range(len(scripts))}
    texts: dict[str, str] = dict.fromkeys(appended, "")
    results = {}
    now = 0.0
    while table.active:
        active = set(table.seqs)
        now += 1.0
        news = table.collect(engine.step(), now)
        assert {a.job_id for a in news.appends} == active  # every active one, every step
        for a in news.appends:
            assert a.attempt == attempt
            assert a.started == (now == 1.0)
            assert a.index == len(appended[a.job_id])
            appended[a.job_id] += a.token_ids
            texts[a.job_id] += a.text
        for f in news.finished:
            assert f.result is not None and f.error is None
            results[f.job_id] = f.result
    for i, script in enumerate(scripts):
        r = results[f"j{i}"]
        assert list(r.token_ids) == appended[f"j{i}"] == [t for c in script for t in c]
        assert r.text == texts[f"j{i}"] and r.attempt == attempt and r.prompt_tokens == 2


def test_inputs_that_cannot_run_become_failed_jobs_with_the_reason() -> None:
    table = SlotTable(ScriptedEngine())
    for value, says in [
        ("text", "an object with prompt_ids"),
        ({"prompt_ids": "abc", "sampling": {"max_tokens": 1}}, "prompt_ids"),
        ({"prompt_ids": [1]}, "missing 'sampling'"),
        (valid_input(max_tokens=500), "max_tokens above"),
    ]:
        finished = table.admit(job("j", value), 0.0, 0.0)
        assert finished is not None and finished.result is None
        assert finished.error is not None and finished.error.startswith("invalid_input: ")
        assert says in finished.error, finished.error
    malformed = ClaimedJob("m", None, 1, 1, 0, malformed="the input is not JSON")
    finished = table.admit(malformed, 0.0, 0.0)
    assert finished is not None and "not JSON" in (finished.error or "")
    assert table.active == 0


def test_time_to_first_token_counts_the_queue_wait_and_gaps_per_token() -> None:
    engine = ScriptedEngine()
    table = SlotTable(engine)
    engine.script["j"] = [[], [1], [2, 3], [4]]
    table.admit(job("j", valid_input()), now=10.0, waited_s=0.5)
    assert table.prefilling()
    assert table.collect(engine.step(), 11.0).ttft_s == []
    news = table.collect(engine.step(), 12.0)
    assert news.ttft_s == [2.5] and news.inter_token_s == []  # 0.5 queued + 2 s here
    assert not table.prefilling()
    assert table.collect(engine.step(), 14.0).inter_token_s == [1.0, 1.0]  # 2 s, 2 tokens
    news = table.collect(engine.step(), 15.0)
    assert news.inter_token_s == [1.0] and news.reasons == ["length"]


def test_a_text_only_last_output_is_in_the_result_as_in_the_stream() -> None:
    table = SlotTable(ScriptedEngine())
    table.admit(job("j", valid_input()), now=0.0, waited_s=0.0)
    table.collect([StepOutput("j", (1,), "a")], 1.0)
    news = table.collect([StepOutput("j", (), "\ufffd", "stop")], 2.0)
    streamed = "a" + "".join(a.text for a in news.appends)
    (end,) = news.finished
    assert end.result is not None and end.result.text == streamed == "a\ufffd"
    assert end.result.token_ids == (1,)


def test_drop_aborts_only_active_sequences() -> None:
    engine = ScriptedEngine()
    table = SlotTable(engine)
    engine.script["a"] = [[1]] * 5
    table.admit(job("a", valid_input()), 0.0, 0.0)
    assert table.drop(frozenset({"a", "unknown"})) == ["a"]
    assert table.active == 0 and engine.active_ids == []


def test_token_rate_counts_the_last_window_only() -> None:
    rate = TokenRate(window_s=10.0)
    rate.add(0.0, 50)
    rate.add(5.0, 50)
    assert rate.rate(5.0) == 10.0
    assert rate.rate(10.5) == 5.0  # the first 50 left the window
    assert rate.rate(16.0) == 0.0
