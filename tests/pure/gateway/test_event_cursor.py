"""A model event stream's cursor (gateway.event_hub): one stream id per partition."""

from __future__ import annotations

import pytest

from gateway.event_hub import MAX_CURSOR_CHARS, cursor_id, just_before, parse_cursor
from gateway.hub_reader import id_order


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("1700000000000-5", ["1700000000000-5"]),  # a plain id from before partitions
        ("1-0,0-0,7-3", ["1-0", "0-0", "7-3"]),
        (f"{2**64 - 1}-{2**64 - 1}", [f"{2**64 - 1}-{2**64 - 1}"]),
        (f"{2**64}-0", None),  # past what Redis accepts
        ("1-0,,2-0", None),
        ("1-0, 2-0", None),
        ("abc", None),
        ("-1-0", None),
        (",".join(["1-0"] * 65), None),  # more partitions than a model may have
    ],
)
def test_a_cursor_is_a_stream_id_per_partition(value: str, parsed: list[str] | None) -> None:
    assert parse_cursor(value) == parsed


def test_the_longest_cursor_fits_the_header_limit() -> None:
    longest = ",".join([f"{2**64 - 1}-{2**64 - 1}"] * 64)
    assert parse_cursor(longest) is not None and len(longest) <= MAX_CURSOR_CHARS
    assert cursor_id({2: "3-0", 0: "1-0", 1: "2-0"}) == "1-0,2-0,3-0"


def test_an_unnamed_partition_starts_at_the_newest_named_millisecond() -> None:
    start = just_before(["5-2", "9-0", "7-7"])
    assert id_order("9-0") > id_order(start) > id_order(f"8-{2**64 - 2}")
    assert just_before(["0-0"]) == "0-0" and just_before([]) == "0-0"
