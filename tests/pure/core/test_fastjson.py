"""sluice.fastjson: orjson's speed, the json module's meaning where orjson refuses."""

from __future__ import annotations

import json
import math

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice import fastjson
from sluicebench.json_bench import run

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _same(a: object, b: object) -> bool:
    """Equal and of the same types all the way down (1.0 == 1 would hide a float)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@given(values)
def test_a_round_trip_gives_the_value_back(value: object) -> None:
    assert _same(fastjson.loads(fastjson.dumps(value)), value)
    # text from elsewhere: orjson's reading, exact while every integer fits in 64 bits
    assert not _fits(value) or fastjson.loads(json.dumps(value)) == value


def _fits(value: object) -> bool:
    if isinstance(value, list):
        return all(map(_fits, value))
    if isinstance(value, dict):
        return all(map(_fits, value.values()))
    return not isinstance(value, int) or isinstance(value, bool) or -(2**63) <= value < 2**64


@pytest.mark.parametrize("big", [-(2**63) - 1, 2**64, 2**70, -(10**30), 10**30 + 1])
def test_integers_past_64_bits_come_back_as_integers(big: int) -> None:
    # orjson parses these as floats; what dumps wrote goes through json instead
    for value in (big, [big, 0.5], {"a": [1, big]}):
        text = fastjson.dumps(value)
        assert text.startswith(" ") and json.loads(text) == value
        assert _same(fastjson.loads(text), value) and _same(fastjson.loads(text.encode()), value)


def test_what_orjson_refuses_falls_back_to_json() -> None:
    lone = "a\ud800b"  # valid JSON, not UTF-8: ASCII escapes keep it
    assert fastjson.dumps(lone) == " " + json.dumps(lone)
    assert fastjson.loads(fastjson.dumps(lone)) == lone
    assert fastjson.dumps({1: "a"}) == ' {"1":"a"}'
    assert math.isnan(fastjson.loads("NaN"))  # stored before this module: still readable
    assert fastjson.dumps([math.inf]) == "[null]"  # the one change: valid JSON out
    with pytest.raises(ValueError):
        fastjson.loads("{nope")
    with pytest.raises(TypeError):
        fastjson.dumps(object())


def test_the_json_benchmark_runs() -> None:
    data = run(dim=8, number=5, repeat=1)
    assert [r["json_us"] > 0 and r["orjson_us"] > 0 for r in data["rows"]] == [True, True]


@given(values)
def test_kept_text_means_what_loads_reads_and_orjson_writes_it_back(value: object) -> None:
    text = fastjson.dumps(value)
    got, kept = fastjson.loads_kept(text)
    assert _same(got, fastjson.loads(text))
    if kept is not None:  # passed through as orjson.Fragment: valid JSON, the same bytes
        assert isinstance(value, dict | list) and kept == text
        assert orjson.dumps(orjson.Fragment(kept)) == orjson.dumps(got)


@pytest.mark.parametrize(
    "text", [' {"a":1}', '{"a":NaN}', "1.5", '"s"', "null", "[1e999]", '{"a":"\\ud800"}']
)
def test_text_not_strict_json_or_not_a_container_is_never_kept(text: str) -> None:
    got, kept = fastjson.loads_kept(text)
    assert kept is None
    assert repr(got) == repr(fastjson.loads(text))
