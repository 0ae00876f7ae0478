"""Strict JSON request bodies: RFC 8259 JSON only, with bounds Python's parser lacks.

Python's ``json.loads`` accepts ``NaN``/``Infinity`` (not JSON), turns ``1e400``
into ``inf``, keeps the last of duplicate keys, raises ``RecursionError`` on deep
nesting and ``ValueError`` past 4300 integer digits; FastAPI answers those with a
bare 400 or lets them through. Every refusal here is a ``json.JSONDecodeError``,
which FastAPI turns into the one 422 path (``gateway.errors``) with our message.
ADR 0070 says why each rule is what it is.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

MAX_DEPTH = 64  # arrays/objects inside each other; real inputs and metadata are shallow
MAX_INT_DIGITS = 20  # as many as 2**64 has: a longer integer is refused before int() runs
INT_MIN, INT_MAX = -(2**63), 2**64 - 1  # what every JSON consumer we feed can hold
_SNIPPET = 40


class _Refused(ValueError):
    """Raised from the parser hooks; becomes a JSONDecodeError with the message."""


def _snippet(text: str) -> str:
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON value (NaN and infinities are refused)")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"number {_snippet(text)} is out of range (not a finite double)")
    return value


def _int(text: str) -> int:
    digits = len(text) - (text[0] == "-")
    if digits > MAX_INT_DIGITS:
        raise _Refused(f"integer of {digits} digits is out of range ({INT_MIN} to {INT_MAX})")
    value = int(text)
    if not INT_MIN <= value <= INT_MAX:
        raise _Refused(f"integer {text} is out of range ({INT_MIN} to {INT_MAX})")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):  # the dict kept only the last of each duplicate
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"duplicate key {_snippet(key)!r}")
            seen.add(key)
    return obj


# For valid JSON only (run after a successful parse). The string pattern is the
# unrolled form: a run of plain characters per step, not one alternation per char.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_SQUARE = bytes.maketrans(b"{}", b"[]")  # depth does not care which kind of bracket
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


def _too_deep(text: str, limit: int) -> bool:
    """True if arrays/objects nest deeper than ``limit``. Outside strings JSON is
    ASCII: keep its brackets, then each ``replace`` removes the innermost pair of
    every branch, so the passes count the depth, all at C speed."""
    outside = _STRING.sub("", text).encode("ascii", "ignore")
    brackets = outside.translate(_SQUARE, _NOT_BRACKET)
    for _ in range(limit):
        brackets = brackets.replace(b"[]", b"")
        if not brackets:
            return False
    return True


# Each hook is a Python call per object or number. Duplicate keys need the object
# hook always; a number can only overflow with an exponent ("1e400") or a long
# digit run ("9" x 20, or 309 digits for a float), which a byte-table translate
# and two substring searches find at C speed: only then are the number hooks on.
_DECODER = json.JSONDecoder(parse_constant=_constant, object_pairs_hook=_object)
_NUMBER_DECODER = json.JSONDecoder(
    parse_float=_float, parse_int=_int, parse_constant=_constant, object_pairs_hook=_object
)
_NUMBER_SHAPE = bytes(
    48 if 48 <= b <= 57 else 101 if b in b"eE" else 32 for b in range(256)
)  # digits -> "0", e/E -> "e", the rest -> " "
_LONG_RUN = b"0" * 19  # -(2**63) has 19 digits: every shorter integer fits


def may_overflow(body: bytes) -> bool:
    """True if a number in ``body`` may be out of range (an exponent or a long digit run)."""
    shape = body.translate(_NUMBER_SHAPE)
    return b"0e" in shape or _LONG_RUN in shape


def loads(body: bytes) -> Any:
    """Parse a request body strictly; every refusal is a ``json.JSONDecodeError``."""
    try:
        text = body.decode("utf-8-sig")  # a leading BOM was accepted before: still is
    except UnicodeDecodeError as e:
        raise json.JSONDecodeError(f"invalid UTF-8 at byte {e.start}", "", 0) from e
    decoder = _NUMBER_DECODER if may_overflow(body) else _DECODER
    try:
        value = decoder.decode(text)
    except json.JSONDecodeError:
        raise
    except RecursionError as e:
        raise json.JSONDecodeError(f"nested deeper than {MAX_DEPTH} levels", "", 0) from e
    except (_Refused, ValueError) as e:  # ValueError: int() past its digit limit, if reached
        raise json.JSONDecodeError(str(e), "", 0) from e
    # The bracket count bounds the depth from above: the usual body never pays more.
    if text.count("[") + text.count("{") > MAX_DEPTH and _too_deep(text, MAX_DEPTH):
        raise json.JSONDecodeError(f"nested deeper than {MAX_DEPTH} levels", "", 0)
    return value


class StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json


class StrictJsonRoute(APIRoute):
    """An APIRoute whose JSON body goes through :func:`loads` (FastAPI's own pattern)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict
