"""The JSON response every route returns directly (no FastAPI encoding pass)."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
from fastapi.responses import JSONResponse


def _unfragment(value: Any) -> Any:
    """A result passed through as stored (``orjson.Fragment``, gateway.service.job_view)
    parsed back, for the ``json`` module's fallbacks below."""
    if isinstance(value, orjson.Fragment):
        return orjson.loads(orjson.dumps(value))  # its text (a Fragment shows none)
    if isinstance(value, dict):
        return {k: _unfragment(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_unfragment(v) for v in value]
    return value


def _finite(value: Any) -> Any:
    """NaN and infinities (a model's output can hold them) become null: valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


class Json(JSONResponse):
    def render(self, content: Any) -> bytes:
        try:
            # orjson: several times faster on a result's floats; NaN and infinities
            # become null, as the fallback below makes them.
            return orjson.dumps(content)
        except orjson.JSONEncodeError:
            pass
        content = _unfragment(content)
        try:
            return super().render(content)
        except ValueError:
            # allow_nan=False refused a non-finite float, or a lone surrogate (valid
            # in JSON input, not encodable as UTF-8) refused to encode: ASCII escapes.
            return json.dumps(
                _finite(content), ensure_ascii=True, allow_nan=False, separators=(",", ":")
            ).encode("ascii")
