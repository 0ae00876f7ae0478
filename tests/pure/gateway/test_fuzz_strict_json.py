"""gateway.strict_json against reference definitions, as hypothesis properties (pure)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.strict_json import INT_MAX, INT_MIN, MAX_DEPTH, loads
from tests.conftest import budget

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=10),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3)
    ),
    max_leaves=30,
)


def depth(v: Any) -> int:
    """The reference: recursion over the value (containers only)."""
    if isinstance(v, dict):
        return 1 + max((depth(x) for x in v.values()), default=0)
    if isinstance(v, list):
        return 1 + max((depth(x) for x in v), default=0)
    return 0


def ints_in_range(v: Any) -> bool:
    if isinstance(v, bool) or v is None or isinstance(v, float | str):
        return True
    if isinstance(v, int):
        return INT_MIN <= v <= INT_MAX
    items = v.values() if isinstance(v, dict) else v
    return all(ints_in_range(x) for x in items)


def wrap(v: Any, levels: int) -> Any:
    for i in range(levels):
        v = [v] if i % 2 else {"k": v}
    return v


# The parser against the reference rules costs microseconds an example: four times
# the profile's budget (400 in `ci`), the same examples every run (derandomize, no
# database: a rare input found at random would fail CI by chance, not by a change).
@budget(4.0, derandomize=True, database=None)
@given(v=values, extra=st.integers(0, MAX_DEPTH + 3))
def test_accepts_exactly_what_the_reference_rules_accept(v: Any, extra: int) -> None:
    v = wrap(v, extra)
    raw = json.dumps(v).encode()
    ok = depth(v) <= MAX_DEPTH and ints_in_range(v)
    if ok:
        assert loads(raw) == v
    else:
        with pytest.raises(json.JSONDecodeError):
            loads(raw)


# As above, twice the budget.
@budget(2.0, derandomize=True, database=None)
@given(v=st.dictionaries(st.text(max_size=4), st.integers(0, 9), min_size=1, max_size=5))
def test_a_duplicated_key_anywhere_is_refused(v: dict[str, int]) -> None:
    key = next(iter(v))
    raw = json.dumps({"outer": [v]})[:-3] + f", {json.dumps(key)}: 0" + "}]}"
    with pytest.raises(json.JSONDecodeError, match="duplicate key"):
        loads(raw.encode())


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e309", "-2e400"])
def test_non_finite_numbers_are_refused_anywhere(literal: str) -> None:
    assert math.isinf(float(literal)) or math.isnan(float(literal))
    for raw in (literal, f"[1, {literal}]", f'{{"a": {{"b": {literal}}}}}'):
        with pytest.raises(json.JSONDecodeError):
            loads(raw.encode())


def _outcome(parse: Any, raw: bytes) -> Any:
    try:
        return ("value", parse(raw))
    except json.JSONDecodeError:
        return ("refused", None)


def _with_duplicate(raw: bytes, dup: bool) -> bytes:
    """The body with its outer object's first key written twice (as a first member)."""
    if not dup or not raw.startswith(b"{") or raw == b"{}":
        return raw
    first_key = json.loads(raw, object_pairs_hook=list)[0][0]
    return b"{" + json.dumps(first_key).encode() + b":0," + raw[1:]


@budget(2.0, derandomize=True, database=None)
@given(
    v=values,
    extra=st.integers(0, 4),
    ascii_only=st.booleans(),
    spaced=st.booleans(),
    dup=st.booleans(),
)
def test_the_lean_paths_plain_parse_agrees_with_strict_parsing(
    v: Any, extra: int, ascii_only: bool, spaced: bool, dup: bool
) -> None:
    from gateway.lean import plain_loads

    sep = (", ", ": ") if spaced else (",", ":")
    raw = json.dumps(wrap(v, extra), ensure_ascii=ascii_only, separators=sep).encode()
    raw = _with_duplicate(raw, dup)
    assert _outcome(plain_loads, raw) == _outcome(loads, raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":1,"a":2}',
        b'{"a":{"b:c":1,"b:c":2}}',
        b'{"a":"x:y","a":"z"}',
        b'{"a":"\\u003a","a":1}',
        b'\xef\xbb\xbf{"a":1}',
        b'{"a":NaN}',
        b'{"a":1e400}',
        b'{"a":123456789012345678901234}',
        b'{"a":"\xff"}',
    ],
)
def test_the_plain_parse_refuses_and_accepts_as_strict_parsing(raw: bytes) -> None:
    from gateway.lean import plain_loads

    assert _outcome(plain_loads, raw) == _outcome(loads, raw)
