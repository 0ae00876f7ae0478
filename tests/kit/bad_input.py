"""The bad-input cases' shared parts (tests/redis/gateway: test_bad_input.py in
process, test_bad_input_http.py through a real HTTP server): the gateway config
with its body limit, and the table of cases docs/api.md promises."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sluice.config import SluiceConfig
from tests.kit.gateway import gateway_config

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
SECTION = "### Bad input, case by case"
LIMIT = 262_144  # room for 100,000 nested arrays, which must fail for their depth


def bad_input_config() -> SluiceConfig:
    return gateway_config({"max_body_bytes": LIMIT})


@dataclass(frozen=True)
class Row:
    status: int
    type: str | None  # None: the HTTP server answers, not the app


def doc_table() -> dict[str, Row]:
    """case -> (status, type) from the table under SECTION in docs/api.md."""
    text = API_DOC.read_text()
    body = text.split(SECTION, 1)[1].split("\n### ", 1)[0]
    rows: dict[str, Row] = {}
    for line in body.splitlines():
        m = re.match(r"\|\s*`([a-z0-9-]+)`\s*\|.*?\|\s*(\d{3})\s*\|\s*([^|]*?)\s*\|", line)
        if m:
            type_ = m.group(3).strip("`") if m.group(3).startswith("`") else None
            rows[m.group(1)] = Row(int(m.group(2)), type_)
    return rows
