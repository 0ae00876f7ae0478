"""The stream follower (sluice.generate.stream.Follower): whatever runs a job
took, a client is shown the whole output once, in order, no token twice."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sluice import fastjson
from sluice.generate.stream import Follower, StreamEntry, entry_from_record, parse_entry
from sluice.jobs import JobRecord
from sluice.records import StreamEvent
from sluice.records import StreamField as S


def piece(t: int) -> str:
    return chr(97 + t % 26) * (t % 3)  # some tokens add no text of their own


def full_text(tokens: list[int], k: int) -> str:
    return "".join(piece(t) for t in tokens[:k])


def shown(tokens: list[int], k: int, holdback: bool) -> str:
    """The text a detokenizer has released after k tokens: one token behind when
    it holds back (a deterministic function of the prefix, as a re-run needs)."""
    return full_text(tokens, max(0, k - 1) if holdback else k)


def run_entries(
    tokens: list[int], attempt: int, stop: int, cuts: list[int], holdback: bool
) -> list[StreamEntry]:
    kind = StreamEvent.START if attempt == 1 else StreamEvent.RESTART
    out = [StreamEntry(f"{attempt}-0", kind, attempt)]  # ids: only their order matters
    bounds = sorted({0, stop, *(c for c in cuts if c < stop)})
    for a, b in zip(bounds, bounds[1:], strict=False):
        text = shown(tokens, b, holdback)[len(shown(tokens, a, holdback)) :]
        entry_id = f"{attempt}-{b}"
        out.append(StreamEntry(entry_id, StreamEvent.TOKENS, attempt, a, tuple(tokens[a:b]), text))
    return out


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[int], list[StreamEntry]]:
    tokens = draw(st.lists(st.integers(0, 100), max_size=24))
    n = len(tokens)
    crashes = draw(st.lists(st.integers(0, n), max_size=3))
    holdback = draw(st.booleans())
    flush = draw(st.booleans())  # the last run releases the held text before its end
    entries: list[StreamEntry] = []
    attempt = 1
    for i, stop in enumerate([*crashes, n]):
        # a run handed back (released) runs again under the same attempt number
        attempt += i > 0 and draw(st.booleans())
        cuts = draw(st.lists(st.integers(1, max(1, n)), max_size=6))
        entries += run_entries(tokens, attempt, stop, cuts, holdback)
    last = attempt
    if flush and holdback and n:
        rest = full_text(tokens, n)[len(shown(tokens, n, True)) :]
        entries.append(StreamEntry("z-0", StreamEvent.TOKENS, last, n, (), rest))
    result = {"text": full_text(tokens, n), "token_ids": tokens}
    entries.append(StreamEntry("z-1", StreamEvent.END, last, result=result))
    return tokens, entries


@given(histories())
def test_any_runs_that_reproduce_the_tokens_show_the_output_exactly_once(
    history: tuple[list[int], list[StreamEntry]],
) -> None:
    tokens, entries = history
    f = Follower()
    deltas = [d for e in entries for d in f.feed(e)]
    assert "".join(d.text for d in deltas) == full_text(tokens, len(tokens))
    assert [t for d in deltas for t in d.token_ids] == tokens
    at = 0
    for d in deltas:
        assert d.index == at
        at += len(d.token_ids)
    assert f.done and f.result is not None and f.error is None
    runs = sum(e.type in (StreamEvent.START, StreamEvent.RESTART) for e in entries)
    assert f.restarts == runs - 1


def test_nothing_is_shown_after_the_end_or_an_error() -> None:
    f = Follower()
    f.feed(StreamEntry("1-0", StreamEvent.START, 1))
    assert f.feed(StreamEntry("1-1", StreamEvent.ERROR, 1, error='{"type":"cancelled"}')) == []
    assert f.done and f.error == '{"type":"cancelled"}' and f.result is None
    assert f.feed(StreamEntry("1-2", StreamEvent.TOKENS, 1, 0, (1,), "a")) == []


def test_a_superseded_run_writes_nothing_a_client_sees() -> None:
    f = Follower()
    f.feed(StreamEntry("1-0", StreamEvent.START, 1))
    f.feed(StreamEntry("2-0", StreamEvent.RESTART, 2))
    assert f.feed(StreamEntry("2-1", StreamEvent.TOKENS, 1, 0, (1,), "a")) == []


def test_parse_entry_reads_the_stored_layout_text_or_bytes() -> None:
    fields: dict[Any, Any] = {
        S.TYPE: "tokens",
        S.ATTEMPT: "2",
        S.INDEX: "3",
        S.IDS: "[7,8]",
        S.TEXT: "hi",
    }
    e = parse_entry("5-1", fields)
    assert (e.id, e.type, e.attempt, e.index, e.token_ids, e.text) == (
        "5-1",
        StreamEvent.TOKENS,
        2,
        3,
        (7, 8),
        "hi",
    )
    raw = {k.encode(): str(v).encode() for k, v in fields.items()}
    assert parse_entry(b"5-1", raw) == e
    end = parse_entry("6-0", {S.TYPE: "end", S.ATTEMPT: "1", S.RESULT: fastjson.dumps({"a": 1})})
    assert end.result == {"a": 1} and end.type == StreamEvent.END


def test_a_gap_in_the_stream_is_filled_by_the_end_entry() -> None:
    f = Follower()
    assert f.feed(StreamEntry("1-0", StreamEvent.TOKENS, 1, 2, (3,), "c")) == []  # trimmed
    [rest] = f.feed(
        StreamEntry("1-1", StreamEvent.END, 1, result={"text": "abc", "token_ids": [1, 2, 3]})
    )
    assert (rest.text, rest.token_ids, rest.index) == ("abc", (1, 2, 3), 0)


def test_a_record_that_ended_gives_the_streams_last_word() -> None:
    base = JobRecord.from_hash("m", {"id": "m.1", "status": "running", "att": "1"})
    assert entry_from_record(base) is None
    done = JobRecord.from_hash("m", {"id": "m.1", "status": "succeeded", "result": '{"text":"x"}'})
    end = entry_from_record(done)
    assert end is not None and end.type == StreamEvent.END and end.result == {"text": "x"}
    gone = entry_from_record(JobRecord.from_hash("m", {"id": "m.1", "status": "cancelled"}))
    assert gone is not None and gone.type == StreamEvent.ERROR and "cancelled" in (gone.error or "")
    f = Follower()
    f.feed(gone)
    assert f.done and f.error
