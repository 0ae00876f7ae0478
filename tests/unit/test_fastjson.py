"""sluice.fastjson: orjson's speed, the json module's meaning where orjson refuses."""

from __future__ import annotations

import json
import math

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


@given(values)
def test_a_round_trip_gives_the_value_back(value: object) -> None:
    assert fastjson.loads(fastjson.dumps(value)) == value
    assert fastjson.loads(json.dumps(value)) == value


def test_what_orjson_refuses_falls_back_to_json() -> None:
    lone = "a\ud800b"  # valid JSON, not UTF-8: ASCII escapes keep it
    assert fastjson.dumps(lone) == json.dumps(lone) and fastjson.loads(fastjson.dumps(lone)) == lone
    big = 2**70
    assert fastjson.loads(fastjson.dumps(big)) == big
    assert fastjson.dumps({1: "a"}) == '{"1":"a"}'
    assert math.isnan(fastjson.loads("NaN"))  # stored before this module: still readable
    assert fastjson.dumps([math.inf]) == "[null]"  # the one change: valid JSON out
    with pytest.raises(ValueError):
        fastjson.loads("{nope")
    with pytest.raises(TypeError):
        fastjson.dumps(object())


def test_the_json_benchmark_runs() -> None:
    data = run(dim=8, number=5, repeat=1)
    assert [r["json_us"] > 0 and r["orjson_us"] > 0 for r in data["rows"]] == [True, True]
