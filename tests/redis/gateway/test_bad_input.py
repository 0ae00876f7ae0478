"""docs/api.md's bad-input table, row by row, on fakeredis and on a real Redis.

The expected status and error type of each row are read from the table itself,
so the documentation and the behaviour cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio

from gateway.strict_json import MAX_DEPTH
from tests.kit.bad_input import LIMIT, bad_input_config, doc_table
from tests.kit.gateway import Harness, HarnessFactory

JSON = {"content-type": "application/json"}
MAX_BATCH = 8  # gateway_config()'s max_batch_inputs


@dataclass(frozen=True)
class Req:
    path: str = "/v1/models/m/jobs"
    method: str = "POST"
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=lambda: dict(JSON))
    params: dict[str, str] | None = None
    mentions: str = ""  # the message must name this


def body(raw: str | bytes, mentions: str, **kw: Any) -> Req:
    return Req(content=raw.encode() if isinstance(raw, str) else raw, mentions=mentions, **kw)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _get(path: str, mentions: str, **params: str) -> Req:
    return Req(path=path, method="GET", headers={}, params=params or None, mentions=mentions)


BATCH = "/v1/models/m/jobs/batch"
CASES: dict[str, Req] = {
    "body-over-limit": body('{"input": "' + "x" * LIMIT + '"}', str(LIMIT)),
    "deep-nesting": body(nested(100_000), f"nested deeper than {MAX_DEPTH}"),
    "nesting-65": body('{"input": ' + nested(65) + "}", f"nested deeper than {MAX_DEPTH}"),
    "invalid-utf8": body(b'{"input": "\xff\xfe"}', "UTF-8"),
    "nan": body('{"input": NaN}', "NaN"),
    "infinity": body('{"input": "x", "metadata": {"a": Infinity}}', "Infinity"),
    "minus-infinity": body('{"input": "x", "deadline_ms": -Infinity}', "-Infinity"),
    "float-overflow": body('{"input": 1e400}', "1e400"),
    "huge-integer": body('{"input": ' + "9" * 5000 + "}", "5000 digits"),
    "integer-over-64-bit": body(json.dumps({"input": "x", "n": [2**64]}), "out of range"),
    "duplicate-key": body('{"input": "a", "input": "b"}', "'input'"),
    "syntax-error": body('{"input": ', "JSON"),
    "empty-body": body(b"", "body"),
    "not-an-object": body("[]", "body"),
    "wrong-content-type": body(
        "input=x", "application/json", headers={"content-type": "text/plain"}
    ),
    "no-content-type": body('{"input": "x"}', "application/json", headers={}),
    "unknown-field": body('{"input": "x", "colour": "red"}', "colour"),
    "unknown-field-batch": body('{"input": "x"}', "input", path=BATCH),
    "missing-input": body("{}", "input"),
    "oversize-batch": body(
        json.dumps({"inputs": ["x"] * (MAX_BATCH + 1)}), f"limit is {MAX_BATCH}", path=BATCH
    ),
    "empty-batch": body('{"inputs": []}', "inputs", path=BATCH),
    "input-over-largest-bucket": body(json.dumps({"input": "w " * 600}), "512"),
    "input-wrong-type": body('{"input": 42}', "input"),
    "deadline-negative": body('{"input": "x", "deadline_ms": -5}', "deadline_ms"),
    "deadline-zero": body('{"input": "x", "deadline_ms": 0}', "deadline_ms"),
    "deadline-huge": body(json.dumps({"input": "x", "deadline_ms": 10**15}), "deadline_ms"),
    "deadline-float": body('{"input": "x", "deadline_ms": 1.5}', "deadline_ms"),
    "deadline-whole-float": body('{"input": "x", "deadline_ms": 5000.0}', "deadline_ms"),
    "deadline-string": body('{"input": "x", "deadline_ms": "5000"}', "deadline_ms"),
    "priority-unknown": body('{"input": "x", "priority": "urgent"}', "priority"),
    "metadata-not-object": body('{"input": "x", "metadata": [1]}', "metadata"),
    "wait-negative": _get("/v1/jobs/m.abc", "wait", wait="-1"),
    "wait-huge": _get("/v1/jobs/m.abc", "wait", wait="1e308"),
    "wait-nan": _get("/v1/jobs/m.abc", "wait", wait="nan"),
    "wait-text": _get("/v1/jobs/m.abc", "wait", wait="abc"),
    "wait-400-digits": _get("/v1/jobs/m.abc", "wait", wait="1" + "0" * 400),
    "timeout-nan": body(
        '{"input": "x"}', "timeout", path="/v1/models/m/predict", params={"timeout": "nan"}
    ),
    "job-id-garbage": _get("/v1/jobs/not-a-job", "not-a-job"),
    "job-id-unicode": _get("/v1/jobs/m.日本語", "m.日本語"),
    "job-id-nul": _get("/v1/jobs/m.%00", "m.\\x00"),
    "job-id-huge": _get("/v1/jobs/m." + "x" * 300, "job_id"),
    "job-id-cancel-garbage": Req(
        path="/v1/jobs/%ff%fe", method="DELETE", headers={}, mentions="job"
    ),
    "unknown-model": body('{"input": "x"}', "nope", path="/v1/models/nope/jobs"),
    "model-name-huge": body('{"input": "x"}', "model", path="/v1/models/" + "m" * 100 + "/jobs"),
    "idempotency-key-huge": body(
        '{"input": "x"}', "Idempotency-Key", headers={**JSON, "idempotency-key": "k" * 201}
    ),
    "idempotency-key-control": body(
        '{"input": "x"}', "Idempotency-Key", headers={**JSON, "idempotency-key": "a\tb"}
    ),
}
HTTP_ONLY = {"lying-length-huge", "length-and-chunked"}  # test_bad_input_http.py


def test_the_table_and_the_cases_name_the_same_rows() -> None:
    table = doc_table()
    assert len(table) >= 40
    assert set(table) == set(CASES) | HTTP_ONLY | {"chunked-over-limit"}


@pytest_asyncio.fixture(loop_scope="function")
async def bgw(make_gateway: HarnessFactory) -> AsyncIterator[Harness]:
    async with make_gateway(bad_input_config()) as h:
        yield h


def error_of(resp: Any) -> dict[str, str]:
    err = resp.json()["error"]
    assert set(err) == {"type", "message"}, err
    return dict(err)


@pytest.mark.parametrize("case", sorted(CASES))
async def test_each_row_of_the_table(bgw: Harness, case: str) -> None:
    req, row = CASES[case], doc_table()[case]
    resp = await bgw.client.request(
        req.method, req.path, content=req.content, headers=req.headers, params=req.params
    )
    assert resp.status_code == row.status, resp.text
    err = error_of(resp)
    assert err["type"] == row.type, err
    assert req.mentions in err["message"], err
    assert (await bgw.queue.stats("m")).queued == 0  # nothing refused was queued


async def test_chunked_over_limit_is_refused_mid_stream(bgw: Harness) -> None:
    row = doc_table()["chunked-over-limit"]
    sent: list[int] = []
    total = LIMIT // 1024 + 100

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(total):
            sent.append(1)
            yield b" " * 1024

    resp = await bgw.client.post("/v1/models/m/jobs", content=chunks(), headers=JSON)
    assert (resp.status_code, error_of(resp)["type"]) == (row.status, row.type)
    assert str(LIMIT) in error_of(resp)["message"]
    assert len(sent) < total, "the whole stream was read before refusing it"
    assert resp.headers["connection"] == "close"


@pytest.mark.parametrize(
    "raw",
    [
        '{"input": "x", "metadata": {"deep": ' + nested(MAX_DEPTH - 2) + "}}",  # 64 levels
        json.dumps({"input": "x", "metadata": {"n": 2**64 - 1, "m": -(2**63)}}),
        '{"input": "x", "metadata": {"f": 1.7976931348623157e308, "g": 1e-400}}',
        '\ufeff{"input": "x"}',  # a UTF-8 BOM, which json.loads(bytes) always allowed
        '{"input": "\\ud800 lone surrogate escape", "metadata": {"[": "{{{{"}}',
    ],
)
async def test_the_edges_just_inside_the_rules_are_accepted(bgw: Harness, raw: str) -> None:
    resp = await bgw.client.post("/v1/models/m/jobs", content=raw.encode(), headers=JSON)
    assert resp.status_code == 202, resp.text


async def test_brackets_inside_strings_do_not_count_as_nesting(bgw: Harness) -> None:
    text = "[" * 2000 + "{" * 1000
    resp = await bgw.client.post("/v1/models/m/jobs", json={"input": text})
    assert resp.status_code == 202, resp.text
    job = await bgw.client.get(f"/v1/jobs/{resp.json()['id']}")
    assert job.json()["status"] == "queued"
