"""Pure rules for bulk files: splitting an upload, parsing a line, output lines."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sluice.errors import InputTooLarge, InvalidInput, SluiceError

# The gateway stores a line it already knows is bad behind this prefix (a JSON line
# never starts with a NUL), so the line still fails alone, with the reason, when fed.
BAD_LINE = "\x00"
MAX_CUSTOM_ID = 256
LINE_FIELDS = frozenset({"input", "custom_id"})
MEDIA_TYPES = frozenset(
    {
        "application/jsonl",
        "application/x-ndjson",
        "application/ndjson",
        "application/x-jsonlines",
        "application/json-lines",
        "text/plain",
    }
)


@dataclass(frozen=True, slots=True)
class Line:
    """One parsed line: its input and optional custom_id."""

    input: Any
    custom_id: str | None = None


def split_upload(body: bytes, max_line_bytes: int) -> list[str]:
    """The stored lines of an upload, in order; one final newline ends the file.

    A line that is not UTF-8 or is over ``max_line_bytes`` is kept as a
    :data:`BAD_LINE` marker with the reason, so it fails alone and numbering holds.
    """
    if body.endswith(b"\n"):
        body = body[:-1]
    out = []
    for raw in body.split(b"\n"):
        raw = raw.removesuffix(b"\r")
        if len(raw) > max_line_bytes:
            out.append(
                f"{BAD_LINE}input_too_large:line is {len(raw)} bytes, the limit is {max_line_bytes}"
            )
            continue
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            out.append(f"{BAD_LINE}invalid_input:line is not valid UTF-8 (byte {e.start})")
    return out


def parse_line(text: str) -> Line:
    """A line as ``{"input": ..., "custom_id": "..."}``; raises InvalidInput or
    InputTooLarge saying what is wrong with it."""
    if text.startswith(BAD_LINE):
        kind, _, why = text[1:].partition(":")
        raise (InputTooLarge if kind == "input_too_large" else InvalidInput)(why)
    if not text.strip():
        raise InvalidInput("blank line: each line must be a JSON object with an 'input'")
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as e:
        raise InvalidInput(f"not valid JSON: {e}") from e
    if not isinstance(value, dict):
        raise InvalidInput(f"a line must be a JSON object, got {type(value).__name__}")
    unknown = sorted(set(value) - LINE_FIELDS)
    if unknown:
        raise InvalidInput(f"unknown field {unknown[0]!r}; a line has 'input' and 'custom_id'")
    if "input" not in value:
        raise InvalidInput("no 'input' field")
    cid = value.get("custom_id")
    if cid is not None and not (isinstance(cid, str) and 0 < len(cid) <= MAX_CUSTOM_ID):
        raise InvalidInput(f"custom_id must be a string of 1-{MAX_CUSTOM_ID} characters")
    return Line(value["input"], cid)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def custom_id_of(text: str) -> str | None:
    """The line's custom_id wherever it can be read, even from a line that fails for
    another reason (no 'input', an input too large), so the error can be matched."""
    if text.startswith(BAD_LINE):
        return None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError:
        return None
    cid = value.get("custom_id") if isinstance(value, dict) else None
    return cid if isinstance(cid, str) and 0 < len(cid) <= MAX_CUSTOM_ID else None


def output_line(
    line_no: int,
    custom_id: str | None,
    status: str,
    result: Any = None,
    error: dict[str, Any] | None = None,
) -> str:
    """One line of the output file (``line`` is 1-based, as an editor counts)."""
    return json.dumps(
        {
            "line": line_no,
            "custom_id": custom_id,
            "status": status,
            "result": result,
            "error": error,
        },
        separators=(",", ":"),
    )


def error_of(e: SluiceError) -> dict[str, str]:
    return {"type": e.type, "message": str(e)}
