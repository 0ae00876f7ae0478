"""The bulk routes on fakeredis: upload limits and media types, ids, cancel, output, keys.

No coordinator runs here (with an injected Redis the gateway queues no RQ slice);
tests/redis/gateway/test_bulk_routes_redis.py runs bulk jobs to the end on a real Redis.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import schemathesis

from gateway.bulk_service import read_upload
from sluice import keys
from sluice.bulk.lines import MEDIA_TYPES
from sluice.config import BulkConfig, SluiceConfig
from sluice.errors import InputTooLarge
from tests.kit.gateway import Harness, HarnessFactory, gateway_config
from tests.kit.security import ALICE, BOB, bearer, keyed_config

LINE_LIMIT = 4096  # gateway_config()'s gateway.max_body_bytes: each line's limit
FILE_LIMIT = 65_536  # bulk.max_file_bytes, larger than a JSON body may be
MAX_LINES = 50
NDJSON = {"content-type": "application/x-ndjson"}
BULK_OPS = {
    ("POST", "/v1/models/{model}/bulk"),
    ("GET", "/v1/bulk/{bulk_id}"),
    ("DELETE", "/v1/bulk/{bulk_id}"),
    ("GET", "/v1/bulk/{bulk_id}/output"),
}


@pytest.fixture
def kind() -> str:
    return "fake"  # conftest runs each harness on fakeredis and a real Redis: fakeredis only


def with_bulk(cfg: SluiceConfig) -> SluiceConfig:
    bulk = BulkConfig(max_file_bytes=FILE_LIMIT, max_lines=MAX_LINES)
    return cfg.model_copy(update={"bulk": bulk})


@pytest_asyncio.fixture(loop_scope="function")
async def bgw(make_gateway: HarnessFactory) -> AsyncIterator[Harness]:
    async with make_gateway(with_bulk(gateway_config())) as h:
        yield h


def jsonl(*lines: Any, end: str = "\n") -> bytes:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + end for x in lines).encode()


async def upload(h: Harness, body: bytes, model: str = "m", **headers: str) -> Any:
    return await h.client.post(
        f"/v1/models/{model}/bulk", content=body, headers={**NDJSON, **headers}
    )


async def upload_id(h: Harness, body: bytes, **headers: str) -> str:
    resp = await upload(h, body, **headers)
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def error_of(resp: Any) -> dict[str, str]:
    err = resp.json()["error"]
    assert set(err) == {"type", "message"}, err
    return dict(err)


async def nothing_stored(h: Harness) -> bool:
    return not await h.redis.keys("*bulk*")


# -- upload ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "lines"),
    [
        (b'{"input": "a"}\n{"input": "b"}\n{"input": "c"}', 3),  # no final newline
        (b'{"input": "a"}\n{"input": "b"}\n{"input": "c"}\n', 3),  # one final newline ends it
        (b'{"input": "a"}\r\n{"input": "b"}\r\n{"input": "c"}\r\n', 3),  # CRLF
        (b'{"input": "a"}\n\n{"input": "c"}\n', 3),  # a blank line is a line (it fails alone)
        (b'{"input": "a"}\n\n', 2),  # only the last newline ends the file
        (b"not json at all", 1),  # nothing is parsed at upload
    ],
)
async def test_upload_answers_202_with_location_and_the_line_count(
    bgw: Harness, body: bytes, lines: int
) -> None:
    resp = await upload(bgw, body)
    assert resp.status_code == 202, resp.text
    view = resp.json()
    assert view["id"].startswith("m.bulk") and view["model"] == "m"
    assert resp.headers["location"] == f"/v1/bulk/{view['id']}"
    assert view["state"] == "queued"
    assert view["counts"] == {
        "total": lines,
        "done": 0,
        "succeeded": 0,
        "failed": 0,
        "remaining": lines,
        "fed": 0,
    }
    assert view["eta_s"] is None and view["started_at"] is None and view["finished_at"] is None
    assert view["output"] == f"/v1/bulk/{view['id']}/output"
    stored = await bgw.redis.lrange(keys.bulk_input_key("m", view["id"]), 0, -1)
    assert len(stored) == lines and not any(s.endswith("\r") for s in stored)
    got = await bgw.client.get(resp.headers["location"])
    assert got.status_code == 200 and got.json() == view
    # Queued for a coordinator: the reaper finds it in the model's active set.
    assert await bgw.redis.zscore(keys.bulk_active_key("m"), view["id"]) is not None


async def test_a_file_over_the_json_limit_is_accepted_and_long_lines_count_once(
    bgw: Harness,
) -> None:
    long_line = json.dumps({"input": "w " * LINE_LIMIT, "custom_id": "long"})
    body = jsonl(*[{"input": f"line {i}"} for i in range(30)], long_line)
    assert LINE_LIMIT < len(body) < FILE_LIMIT  # over gateway.max_body_bytes, under bulk's
    bulk_id = await upload_id(bgw, body)
    stored = await bgw.redis.lrange(keys.bulk_input_key("m", bulk_id), 0, -1)
    assert len(stored) == 31
    # Over gateway.max_body_bytes: kept as a marker, so it fails alone when fed.
    assert stored[-1].startswith("\x00input_too_large:") and str(LINE_LIMIT) in stored[-1]


async def test_a_non_utf8_line_is_stored_as_a_bad_line_not_refused(bgw: Harness) -> None:
    bulk_id = await upload_id(bgw, b'{"input": "a"}\n{"input": "\xff\xfe"}\n')
    stored = await bgw.redis.lrange(keys.bulk_input_key("m", bulk_id), 0, -1)
    assert stored[0] == '{"input": "a"}'
    assert stored[1].startswith("\x00invalid_input:") and "UTF-8" in stored[1]


@pytest.mark.parametrize(
    "ctype",
    [*sorted(MEDIA_TYPES), "application/x-ndjson; charset=utf-8", "Application/X-NDJSON"],
)
async def test_every_jsonl_media_type_is_accepted(bgw: Harness, ctype: str) -> None:
    resp = await upload(bgw, jsonl({"input": "a"}), **{"content-type": ctype})
    assert resp.status_code == 202, resp.text


@pytest.mark.parametrize(
    "ctype",
    ["application/json", "application/x-www-form-urlencoded", "application/octet-stream", None],
)
async def test_a_wrong_content_type_is_415_with_the_error_body(
    bgw: Harness, ctype: str | None
) -> None:
    headers = {"content-type": ctype} if ctype else {}
    resp = await bgw.client.post(
        "/v1/models/m/bulk", content=jsonl({"input": "a"}), headers=headers
    )
    assert resp.status_code == 415, resp.text
    err = error_of(resp)
    assert err["type"] == "unsupported_media_type" and "application/x-ndjson" in err["message"]
    assert await nothing_stored(bgw)


async def test_over_the_file_limit_with_content_length_is_413(bgw: Harness) -> None:
    body = jsonl(*[{"input": "x" * 1000}] * 70)
    assert len(body) > FILE_LIMIT
    resp = await upload(bgw, body)
    assert resp.status_code == 413, resp.text
    err = error_of(resp)
    assert err["type"] == "input_too_large" and str(FILE_LIMIT) in err["message"]
    assert resp.headers["connection"] == "close"
    assert await nothing_stored(bgw)


async def test_over_the_file_limit_chunked_is_413_before_the_end(bgw: Harness) -> None:
    sent: list[int] = []
    total = FILE_LIMIT // 1024 + 50
    line = json.dumps({"input": "x" * 1000}).encode() + b"\n"

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(total):
            sent.append(1)
            yield line

    resp = await bgw.client.post("/v1/models/m/bulk", content=chunks(), headers=NDJSON)
    assert resp.status_code == 413, resp.text
    err = error_of(resp)
    assert err["type"] == "input_too_large" and str(FILE_LIMIT) in err["message"]
    assert len(sent) < total, "the whole stream was read before refusing it"
    assert await nothing_stored(bgw)


async def test_a_chunked_file_under_the_limit_is_accepted(bgw: Harness) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"input": "a"}\n{"inp'
        yield b'ut": "b"}\n'

    resp = await bgw.client.post("/v1/models/m/bulk", content=chunks(), headers=NDJSON)
    assert resp.status_code == 202, resp.text
    assert resp.json()["counts"]["total"] == 2


async def test_the_upload_stops_reading_once_past_the_limit() -> None:
    read: list[int] = []

    async def parts() -> AsyncIterator[bytes]:
        for _ in range(10):
            read.append(1)
            yield b"x" * 100

    with pytest.raises(InputTooLarge, match="bulk.max_file_bytes"):
        await read_upload(parts(), 250)
    assert len(read) == 3
    assert await read_upload(parts(), 1000) == b"x" * 1000


@pytest.mark.parametrize("body", [b"", b"\n", b"\r\n", b"  \n\t\n"])
async def test_an_empty_file_is_422(bgw: Harness, body: bytes) -> None:
    resp = await upload(bgw, body)
    assert resp.status_code == 422, resp.text
    err = error_of(resp)
    assert err["type"] == "invalid_input" and "empty" in err["message"]
    assert await nothing_stored(bgw)


async def test_more_lines_than_bulk_max_lines_is_413(bgw: Harness) -> None:
    resp = await upload(bgw, jsonl(*[{"input": "a"}] * (MAX_LINES + 1)))
    assert resp.status_code == 413, resp.text
    err = error_of(resp)
    assert err["type"] == "input_too_large"
    assert f"{MAX_LINES + 1} lines" in err["message"] and "bulk.max_lines" in err["message"]
    assert await nothing_stored(bgw)
    exactly = await upload(bgw, jsonl(*[{"input": "a"}] * MAX_LINES))
    assert exactly.status_code == 202 and exactly.json()["counts"]["total"] == MAX_LINES


async def test_an_unknown_model_is_404(bgw: Harness) -> None:
    resp = await upload(bgw, jsonl({"input": "a"}), model="nope")
    assert resp.status_code == 404, resp.text
    err = error_of(resp)
    assert err["type"] == "unknown_model" and "nope" in err["message"]
    assert await nothing_stored(bgw)
    huge = await upload(bgw, jsonl({"input": "a"}), model="m" * 100)
    assert huge.status_code == 422, huge.text
    assert error_of(huge)["type"] == "invalid_request" and "model" in error_of(huge)["message"]


# -- ids --------------------------------------------------------------------------------
BAD_IDS = [
    "nodot",
    "m.notbulk",
    "m.bulk",
    "m.bulkXYZ",
    "m.bulk0123-1",
    "nope.bulk0123abcd",
    "pinned.bulk0123abcd",
    ".bulk0123",
    "m.",
    "m.%00",
    "m.日本語",
    "%ff%fe",
    "m.bulk" + "0" * 250,
]
ROUTES = [("GET", ""), ("GET", "/output"), ("DELETE", "")]


@pytest.mark.parametrize("bulk_id", BAD_IDS)
async def test_an_unknown_or_malformed_bulk_id_is_404(bgw: Harness, bulk_id: str) -> None:
    for method, suffix in ROUTES:
        resp = await bgw.client.request(method, f"/v1/bulk/{bulk_id}{suffix}")
        assert resp.status_code == 404, (method, suffix, resp.text)
        assert error_of(resp)["type"] == "job_not_found"


async def test_an_id_naming_another_key_of_a_bulk_job_is_404(bgw: Harness) -> None:
    # The id is part of its keys' names: "<id>:in" is its input list, "<id>:out" its
    # output hash. They were read as a bulk job's hash (a WRONGTYPE 503) before.
    bulk_id = await upload_id(bgw, jsonl({"input": "a"}, {"input": "b"}))
    for suffix in (":in", ":out", ":pending", ":in:x"):
        for method, route in ROUTES:
            resp = await bgw.client.request(method, f"/v1/bulk/{bulk_id}{suffix}{route}")
            assert resp.status_code == 404, (suffix, method, route, resp.text)
    assert (await bgw.client.get(f"/v1/bulk/{bulk_id}")).json()["state"] == "queued"


async def test_a_bulk_id_over_256_characters_is_422_like_a_job_id(bgw: Harness) -> None:
    for method, suffix in ROUTES:
        resp = await bgw.client.request(method, f"/v1/bulk/{'x' * 300}{suffix}")
        assert resp.status_code == 422, resp.text
        err = error_of(resp)
        assert err["type"] == "invalid_request" and "bulk_id" in err["message"]


# -- output and cancel ------------------------------------------------------------------
async def test_output_before_the_end_is_409_naming_the_state(bgw: Harness) -> None:
    bulk_id = await upload_id(bgw, jsonl({"input": "a"}, {"input": "b"}))
    resp = await bgw.client.get(f"/v1/bulk/{bulk_id}/output")
    assert resp.status_code == 409, resp.text
    err = error_of(resp)
    assert err["type"] == "conflict"
    assert "is queued" in err["message"] and "0 of 2" in err["message"]


async def test_cancel_a_queued_bulk_job_then_its_output_says_cancelled(bgw: Harness) -> None:
    lines = [
        json.dumps({"input": "a", "custom_id": "first"}),
        json.dumps({"input": "b"}),  # parses, no custom_id
        "{not json",
        json.dumps({"custom_id": "no-input"}),  # fails (no input), its custom_id still read
        "",
        json.dumps({"custom_id": "last", "input": {"text": "c"}}),
    ]
    bulk_id = await upload_id(bgw, jsonl(*lines))
    resp = await bgw.client.delete(f"/v1/bulk/{bulk_id}")
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"id": bulk_id, "state": "cancelled", "previous_state": "queued"}
    view = (await bgw.client.get(f"/v1/bulk/{bulk_id}")).json()
    assert view["state"] == "cancelled" and view["finished_at"] is not None
    assert view["rate_per_s"] is None and view["eta_s"] is None
    # Ended: the reaper never resumes it.
    assert await bgw.redis.zscore(keys.bulk_active_key("m"), bulk_id) is None

    again = await bgw.client.delete(f"/v1/bulk/{bulk_id}")
    assert again.status_code == 409, again.text
    assert error_of(again)["type"] == "conflict" and "cancelled" in error_of(again)["message"]

    out = await bgw.client.get(f"/v1/bulk/{bulk_id}/output")
    assert out.status_code == 200, out.text
    assert out.headers["content-type"] == "application/x-ndjson"
    assert out.headers["content-disposition"] == f'attachment; filename="{bulk_id}.jsonl"'
    assert out.text.endswith("\n")
    rows = [json.loads(x) for x in out.text.splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r["custom_id"] for r in rows] == ["first", None, None, "no-input", None, "last"]
    for r in rows:
        assert set(r) == {"line", "custom_id", "status", "result", "error"}
        assert r["status"] == "cancelled" and r["result"] is None
        assert r["error"]["type"] == "cancelled" and "not run to the end" in r["error"]["message"]


# -- the bulk exemption does not leak to other routes ---------------------------------
@pytest.mark.parametrize(
    "path",
    ["/v1/models/m/jobs", "/v1/models/m/jobs/batch", "/v1/models/m/predict", "/v1/models/m/bulk/"],
)
async def test_jsonl_is_still_415_on_the_json_routes(bgw: Harness, path: str) -> None:
    resp = await bgw.client.post(path, content=jsonl({"input": "a"}), headers=NDJSON)
    assert resp.status_code == 415, resp.text
    err = error_of(resp)
    assert err["type"] == "unsupported_media_type" and "application/json" in err["message"]
    assert (await bgw.queue.stats("m")).queued == 0


async def test_a_json_body_over_max_body_bytes_is_413_though_bulk_allows_more(
    bgw: Harness,
) -> None:
    body = json.dumps({"input": "w " * LINE_LIMIT}).encode()
    assert LINE_LIMIT < len(body) < FILE_LIMIT
    json_headers = {"content-type": "application/json"}
    resp = await bgw.client.post("/v1/models/m/jobs", content=body, headers=json_headers)
    assert resp.status_code == 413, resp.text
    assert str(LINE_LIMIT) in error_of(resp)["message"]

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 1024):
            yield body[i : i + 1024]

    chunked = await bgw.client.post("/v1/models/m/jobs", content=chunks(), headers=json_headers)
    assert chunked.status_code == 413, chunked.text
    assert str(LINE_LIMIT) in error_of(chunked)["message"]
    assert (await bgw.queue.stats("m")).queued == 0


# -- API keys ---------------------------------------------------------------------------
@pytest_asyncio.fixture(loop_scope="function")
async def keyed(make_gateway: HarnessFactory) -> AsyncIterator[Harness]:
    async with make_gateway(with_bulk(keyed_config())) as h:
        yield h


async def test_another_keys_bulk_job_is_404_like_an_unknown_one(keyed: Harness) -> None:
    bulk_id = await upload_id(keyed, jsonl({"input": "a"}), **bearer(ALICE))
    assert await keyed.redis.hget(keys.bulk_key("m", bulk_id), "owner") == "alice"
    unknown = bulk_id[:-4] + "0000"
    for method, suffix in ROUTES:
        theirs = await keyed.client.request(
            method, f"/v1/bulk/{bulk_id}{suffix}", headers=bearer(BOB)
        )
        none = await keyed.client.request(
            method, f"/v1/bulk/{unknown}{suffix}", headers=bearer(BOB)
        )
        assert theirs.status_code == none.status_code == 404, (method, suffix, theirs.text)
        assert error_of(theirs)["message"] == error_of(none)["message"].replace(unknown, bulk_id)
    mine = await keyed.client.get(f"/v1/bulk/{bulk_id}", headers=bearer(ALICE))
    assert mine.status_code == 200 and mine.json()["state"] == "queued"  # bob's DELETE did nothing
    cancel = await keyed.client.delete(f"/v1/bulk/{bulk_id}", headers=bearer(ALICE))
    assert cancel.status_code == 200 and cancel.json()["state"] == "cancelled"
    out = await keyed.client.get(f"/v1/bulk/{bulk_id}/output", headers=bearer(ALICE))
    assert out.status_code == 200 and json.loads(out.text)["status"] == "cancelled"


async def test_every_bulk_route_needs_a_key(keyed: Harness) -> None:
    bulk_id = await upload_id(keyed, jsonl({"input": "a"}), **bearer(ALICE))
    calls = [
        ("POST", "/v1/models/m/bulk"),
        ("GET", f"/v1/bulk/{bulk_id}"),
        ("GET", f"/v1/bulk/{bulk_id}/output"),
        ("DELETE", f"/v1/bulk/{bulk_id}"),
    ]
    for method, path in calls:
        for headers in ({}, bearer("sk_wrong"), {"content-type": "application/json"}):
            resp = await keyed.client.request(
                method, path, content=b'{"input": "a"}', headers=headers
            )
            assert resp.status_code == 401, (method, path, headers, resp.text)
            assert resp.headers["www-authenticate"].startswith("Bearer")
            assert error_of(resp)["type"] == "unauthorized"
    assert await keyed.redis.zcard(keys.bulk_active_key("m")) == 1  # alice's only, untouched
    assert await keyed.redis.hget(keys.bulk_key("m", bulk_id), "state") == "queued"


# -- the schema -------------------------------------------------------------------------
def operations(raw: dict[str, Any]) -> set[tuple[str, str]]:
    return {(m.upper(), p) for p, item in raw["paths"].items() for m in item}


async def test_the_schema_lists_the_bulk_operations_and_stays_valid(bgw: Harness) -> None:
    raw = (await bgw.client.get("/openapi.json")).json()
    assert BULK_OPS <= operations(raw)
    schema = schemathesis.openapi.from_dict(raw)
    schema.validate()  # against the OpenAPI meta-schema
    ops = {(r.ok().method.upper(), r.ok().path) for r in schema.get_all_operations()}
    assert BULK_OPS <= ops  # each one loads as an operation schemathesis can fuzz
    upload_op = raw["paths"]["/v1/models/{model}/bulk"]["post"]
    content = upload_op["requestBody"]["content"]
    assert next(iter(content)) == "application/x-ndjson" and set(content) == MEDIA_TYPES
    assert {"202", "404", "413", "415", "422"} <= set(upload_op["responses"])
    output_op = raw["paths"]["/v1/bulk/{bulk_id}/output"]["get"]
    assert "application/x-ndjson" in output_op["responses"]["200"]["content"]
    assert "409" in output_op["responses"]
    # Errors are documented with the error body the gateway sends, 422 included.
    for path, method in [
        ("/v1/bulk/{bulk_id}", "get"),
        ("/v1/bulk/{bulk_id}", "delete"),
        ("/v1/bulk/{bulk_id}/output", "get"),
    ]:
        ref = raw["paths"][path][method]["responses"]["422"]["content"]["application/json"]
        assert ref["schema"]["$ref"].endswith("/ErrorBody"), (path, method)


async def test_with_keys_the_schema_says_the_bulk_operations_need_one(keyed: Harness) -> None:
    raw = (await keyed.client.get("/openapi.json")).json()
    for method, path in BULK_OPS:
        assert raw["paths"][path][method.lower()]["security"], (method, path)
