"""JSON through orjson where it can, the standard library where it cannot.

orjson encodes and parses the hot path's JSON (a 384-float embedding per job,
written by the worker, read and answered by the gateway) several times faster
than the ``json`` module (``sluice bench json``, docs/benchmarks/e2e.md). What orjson refuses
falls back to ``json`` and means the same as before: a lone surrogate, an integer
over 64 bits, a non-string key, ``NaN`` in stored text. One difference, on
purpose: a non-finite float encodes as ``null`` (valid JSON) instead of ``NaN``.

orjson *parses* an integer outside [-2**63, 2**64) as a float instead of refusing
it, so text the fallback wrote starts with one space (JSON allows it; every reader
sees the same value) and ``loads`` sends such text to ``json``: what this module
wrote comes back exactly, at no cost to the orjson path. Text written elsewhere
with an integer that large reads as a float; Sluice's stored JSON all comes from
``dumps`` (Lua writes only numbers it made itself).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_FALLBACK = " "  # leading whitespace: valid JSON, never written by orjson


def dumps(value: Any) -> str:
    """Compact JSON text; a value orjson cannot encode goes through ``json`` (ASCII
    escapes, so a lone surrogate survives the trip to Redis) behind a leading space."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return _FALLBACK + json.dumps(value, separators=(",", ":"))


def loads(text: str | bytes) -> Any:
    """The value of JSON text; raises ValueError like ``json.loads`` when it is not JSON."""
    if text[:1] in (_FALLBACK, b" "):
        return json.loads(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def loads_kept(text: str) -> tuple[Any, str | None]:
    """The value of stored JSON text, and the text itself when an answer may carry it
    as it is (``orjson.Fragment``, no parse-and-encode of a 384-float result): an
    object or array that orjson parsed, so strict JSON with nothing to make ``null``.
    Otherwise (value as :func:`loads` reads it, None); ``ValueError`` as ``loads``."""
    if text[:1] in ("{", "["):
        try:
            return orjson.loads(text), text
        except orjson.JSONDecodeError:
            pass
    return loads(text), None
