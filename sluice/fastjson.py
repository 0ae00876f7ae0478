"""JSON through orjson where it can, the standard library where it cannot.

orjson encodes and parses the hot path's JSON (a 384-float embedding per job,
written by the worker, read and answered by the gateway) several times faster
than the ``json`` module (``sluice bench json``, docs/benchmarks/e2e.md). What orjson refuses
falls back to ``json`` and means the same as before: a lone surrogate, an integer
over 64 bits, a non-string key, ``NaN`` in stored text. One difference, on
purpose: a non-finite float encodes as ``null`` (valid JSON) instead of ``NaN``.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any) -> str:
    """Compact JSON text; a value orjson cannot encode goes through ``json`` (ASCII
    escapes, so a lone surrogate survives the trip to Redis)."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, separators=(",", ":"))


def loads(text: str | bytes) -> Any:
    """The value of JSON text; raises ValueError like ``json.loads`` when it is not JSON."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
