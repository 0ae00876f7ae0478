"""Pure rules of bulk files: splitting an upload, parsing lines, config checks."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bulkworker.coordinator import _runs
from bulkworker.feeder import build_chunk
from sluice.bulk.lines import BAD_LINE, custom_id_of, parse_line, split_upload
from sluice.config import parse_config
from sluice.cost import CostEstimator
from sluice.errors import ConfigError, InputTooLarge, InvalidInput
from sluice.jobs import BULK


def test_split_upload_counts_lines_as_an_editor_does() -> None:
    assert split_upload(b'{"input": 1}\n{"input": 2}\n', 100) == ['{"input": 1}', '{"input": 2}']
    assert split_upload(b'{"input": 1}\r\n{"input": 2}', 100) == ['{"input": 1}', '{"input": 2}']
    assert split_upload(b"a\n\nb\n", 100) == ["a", "", "b"]  # an inner blank line is a line


def test_split_upload_keeps_bad_lines_in_place_with_the_reason() -> None:
    lines = split_upload(b"ok\n\xff\xfe\n" + b"x" * 20 + b"\nok", 10)
    assert lines[0] == "ok" and lines[3] == "ok"
    assert lines[1].startswith(BAD_LINE + "invalid_input:")
    assert lines[2].startswith(BAD_LINE + "input_too_large:")
    with pytest.raises(InvalidInput, match="UTF-8"):
        parse_line(lines[1])
    with pytest.raises(InputTooLarge, match="20 bytes"):
        parse_line(lines[2])


@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",))),
        min_size=1,
    )
)
def test_split_upload_round_trips_any_text_lines(lines: list[str]) -> None:
    body = ("\n".join(lines) + "\n").encode()
    assert split_upload(body, 10**9) == lines


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "blank line"),
        ("   ", "blank line"),
        ("{oops", "not valid JSON"),
        ('{"input": NaN}', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('"just text"', "must be a JSON object"),
        ('{"custom_id": "a"}', "no 'input'"),
        ('{"inputs": "a"}', "unknown field 'inputs'"),
        ('{"input": "a", "custom_id": 5}', "custom_id must be a string"),
        ('{"input": "a", "custom_id": ""}', "custom_id must be a string"),
        ('{"input": "a", "custom_id": "' + "x" * 257 + '"}', "custom_id must be a string"),
    ],
)
def test_a_bad_line_says_what_is_wrong(text: str, error: str) -> None:
    with pytest.raises(InvalidInput, match=error):
        parse_line(text)


def test_good_lines_parse() -> None:
    assert parse_line('{"input": {"text": "a"}}').input == {"text": "a"}
    line = parse_line('{"input": null, "custom_id": "row-7"}')
    assert line.input is None and line.custom_id == "row-7"


def test_custom_id_is_read_even_from_lines_that_fail() -> None:
    assert custom_id_of('{"custom_id": "no-input"}') == "no-input"
    assert custom_id_of('{"custom_id": 3, "input": 1}') is None
    assert custom_id_of("{oops") is None
    assert custom_id_of(BAD_LINE + "invalid_input:x") is None


def test_build_chunk_gives_stable_bulk_jobs_and_fails_bad_lines_alone() -> None:
    cfg = parse_config(
        {"models": {"m": {"handler": "synthetic", "buckets": [4, 16], "cost": {"method": "words"}}}}
    )
    est = CostEstimator(cfg.models["m"])
    lines = [
        json.dumps({"input": "a b c", "custom_id": "x"}),
        "{bad",
        json.dumps({"input": " ".join(["w"] * 17)}),
        json.dumps({"input": "a"}),
    ]
    chunk = build_chunk("m.bulk1", 10, lines, est)
    assert [j.id for j in chunk.jobs] == ["m.bulk1-10", "m.bulk1-13"]
    assert chunk.indexes == [10, 13]
    assert {j.priority for j in chunk.jobs} == {BULK}
    assert [j.bucket for j in chunk.jobs] == ["4", "4"] and chunk.cost == 4
    assert chunk.jobs[0].metadata == {"bulk": "m.bulk1", "line": 11, "custom_id": "x"}
    failed = {i: json.loads(out) for i, out in chunk.failed}
    assert failed[11]["line"] == 12 and failed[11]["error"]["type"] == "invalid_input"
    assert failed[12]["error"]["type"] == "input_too_large"
    # The same lines again (a resumed coordinator) give the same job ids.
    again = build_chunk("m.bulk1", 10, lines, est)
    assert [j.id for j in again.jobs] == ["m.bulk1-10", "m.bulk1-13"]


@pytest.mark.parametrize(
    ("indexes", "runs"),
    [
        ([], []),
        ([3], [(3, 4)]),
        ([5, 1, 2, 3, 9], [(1, 4), (5, 6), (9, 10)]),
    ],
)
def test_runs_of_consecutive_lines(indexes: list[int], runs: list[tuple[int, int]]) -> None:
    assert _runs(indexes) == runs


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        (
            {"models": {"m": {"handler": "h", "bulk": {"max_batch_tokens": 100}}}},
            "bulk.max_batch_tokens (100) < the largest bucket (512)",
        ),
        (
            {"models": {"m": {"handler": "h"}}, "bulk": {"lease_s": 0.1, "poll_s": 0.1}},
            "lease_s (0.1) must be > 2 x poll_s (0.1)",
        ),
        ({"models": {"m": {"handler": "h"}}, "bulk": {"rq_queue": "a b"}}, "rq_queue"),
    ],
)
def test_bulk_config_errors_name_the_field(doc: dict[str, object], error: str) -> None:
    with pytest.raises(ConfigError, match=error.replace("(", r"\(").replace(")", r"\)")):
        parse_config(doc)


def test_bulk_window_defaults_to_four_batches() -> None:
    cfg = parse_config({"models": {"m": {"handler": "h", "batching": {"max_batch": 8}}}})
    assert cfg.models["m"].bulk_max_queued == 32
