"""The lean path (gateway.lean) answers exactly as FastAPI's router does.

The same requests, in the same order, go to two apps on fakeredis: one with the
lean path (the default) and one with ``lean=False``; each pair of answers must
have the same status, the same headers that matter and the same body (job ids
and timings aside, which differ by nature). Good requests and bad ones: wrong
types, unknown and extra fields, bad JSON, wrong media type, oversize, bad keys,
unknown or too long model names, odd ``?timeout=`` values, idempotency replays
and conflicts, a full queue, a wait that times out; job reads (``GET
/v1/jobs/{job_id}``, ADR 0178) with and without API keys, odd ``?wait=`` values
and ids. The request metrics of the two apps must match too (the lean path
labels its routes as the router does).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import fakeredis
import httpx
import pytest
from fakeredis import aioredis as fake_aioredis
from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st

from gateway.app import create_app
from gateway.lean import query_timeout, query_wait
from gateway.state import GatewayState
from sluice.apikeys import hash_key
from sluice.config import SluiceConfig, parse_config
from sluice.jobs import JobRecord, Outcome
from sluice.queue import AsyncQueueClient
from tests.conftest import budget
from tests.kit.security import ALICE, BOB, bearer
from tests.waits import async_wait_until

KEPT_HEADERS = (
    "content-type",
    "content-length",
    "location",
    "retry-after",
    "www-authenticate",
    "connection",
    "idempotent-replayed",
)
JOB_ID = re.compile(r"[A-Za-z0-9_-]+\.(?:\d+~)?[0-9a-f]{27}")
JSON = {"content-type": "application/json"}
LONG_NAME = "x" * 65


def config(keys: bool = True) -> SluiceConfig:
    """``m`` and ``emb`` are served by the test's worker; ``slow`` never is; ``full``
    holds one job. ``keys=False``: an open gateway."""
    model = {
        "handler": "synthetic",
        "buckets": [32, 128, 512],
        "cost": {"method": "words"},
        "autoscaling": {"min_replicas": 0, "max_replicas": 2},
        "params": {"embedding_dim": 4},
    }
    return parse_config(
        {
            "models": {
                "m": model,
                "emb": model,
                "slow": model,
                "plain": {**model, "params": {}},
                "full": {**model, "queue": {"max_queued_jobs": 1}},
            },
            "gateway": {"max_body_bytes": 2048, "max_batch_inputs": 4, "predict_timeout_s": 0.2},
            "auth": {
                "keys": [
                    {"name": "alice", "hash": hash_key(ALICE)},
                    {"name": "bob", "hash": hash_key(BOB), "max_priority": "normal"},
                ]
                if keys
                else []
            },
        }
    )


@dataclass
class Side:
    client: httpx.AsyncClient
    queue: AsyncQueueClient  # plays the worker
    state: GatewayState


@asynccontextmanager
async def side(lean: bool, keys: bool = True) -> AsyncIterator[Side]:
    server = fakeredis.FakeServer()
    r = fake_aioredis.FakeRedis(server=server, decode_responses=True)
    worker = fake_aioredis.FakeRedis(server=server, decode_responses=True)
    cfg = config(keys)
    app = create_app(cfg, redis=r, lean=lean)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(app.router.lifespan_context(app))
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")
        await stack.enter_async_context(client)
        yield Side(client, AsyncQueueClient(worker, dict(cfg.models)), app.state.gateway)
    await worker.aclose()


async def serve(s: Side, model: str, n: int) -> None:
    """Play a worker until ``n`` jobs of ``model`` are done."""
    done = 0

    async def step() -> bool:
        nonlocal done
        batch = await s.queue.claim(model, "w1")
        outcomes = [Outcome.ok(j.id, {"embedding": [1.0, 0.5, -0.25, 2.0]}) for j in batch.jobs]
        if outcomes:
            await s.queue.complete(model, outcomes)
            done += len(outcomes)
        return done >= n

    await async_wait_until(step, what=f"{n} jobs of {model}")


def _norm(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "<t>" if k == "timings" else _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if isinstance(value, str):
        return JOB_ID.sub("<id>", value)
    return value


def shape(resp: httpx.Response) -> tuple[int, dict[str, str], Any]:
    headers = {k: JOB_ID.sub("<id>", resp.headers[k]) for k in KEPT_HEADERS if k in resp.headers}
    if b'"timings"' in resp.content:  # its floats differ in length by nature
        headers.pop("content-length")
    try:
        body = _norm(json.loads(resp.content))
    except ValueError:
        body = resp.content
    return resp.status_code, headers, body


Send = Callable[[httpx.AsyncClient], Awaitable[httpx.Response]]


def post(
    path: str, body: Any = None, raw: bytes | None = None, headers: dict[str, str] | None = None
) -> Send:
    content = raw if raw is not None else json.dumps(body).encode()
    sent = {**JSON, **bearer(ALICE), **(headers or {})}
    sent = {k: v for k, v in sent.items() if v}  # an empty value: leave the header out

    def send(c: httpx.AsyncClient) -> Awaitable[httpx.Response]:
        return c.post(path, content=content, headers=sent)

    return send


def chunked(path: str, size: int) -> Send:
    async def parts() -> AsyncIterator[bytes]:
        yield b'{"input": "'
        yield b"a" * size
        yield b'"}'

    def send(c: httpx.AsyncClient) -> Awaitable[httpx.Response]:
        return c.post(path, content=parts(), headers={**JSON, **bearer(ALICE)})

    return send


ONE, BOB_KEY = {"model": "emb", "input": "a"}, bearer(BOB)
PREDICT, JOBS, EMB = "/v1/models/m/predict", "/v1/models/m/jobs", "/v1/embeddings"
# (what is sent, (model the worker serves, jobs) or None)
CASES: list[tuple[str, Send, tuple[str, int] | None]] = [
    ("predict ok", post(PREDICT, {"input": "hello there"}), ("m", 1)),
    ("predict metadata", post(PREDICT, {"input": "a", "metadata": {"k": [1, 2]}}), ("m", 1)),
    ("predict waits out", post("/v1/models/slow/predict", {"input": "a"}), None),
    ("predict ?timeout", post("/v1/models/slow/predict?timeout=0.05", {"input": "a"}), None),
    ("predict ?timeout=0", post(PREDICT + "?timeout=0", {"input": "a"}), None),
    ("predict ?timeout=61", post(PREDICT + "?timeout=61", {"input": "a"}), None),
    ("predict ?timeout=abc", post(PREDICT + "?timeout=abc", {"input": "a"}), None),
    ("predict ?timeout=nan", post(PREDICT + "?timeout=nan", {"input": "a"}), None),
    ("predict ?timeout twice", post(PREDICT + "?timeout=1&timeout=x", {"input": "a"}), None),
    ("predict other query", post(PREDICT + "?x=1", {"input": "b"}), ("m", 1)),
    ("predict bad priority", post(PREDICT, {"input": "a", "priority": "urgent"}), None),
    ("predict string deadline", post(PREDICT, {"input": "a", "deadline_ms": "500"}), None),
    ("predict extra field", post(PREDICT, {"input": "a", "model": "m"}), None),
    ("predict no input", post(PREDICT, {"priority": "low"}), None),
    ("predict a list body", post(PREDICT, [1, 2]), None),
    ("predict bad JSON", post(PREDICT, raw=b'{"input": '), None),
    ("predict NaN", post(PREDICT, raw=b'{"input": NaN}'), None),
    ("predict duplicate key", post(PREDICT, raw=b'{"input": 1, "input": 2}'), None),
    ("predict empty body", post(PREDICT, raw=b""), None),
    ("predict no media type", post(PREDICT, {"input": "a"}, headers={"content-type": ""}), None),
    (
        "predict text/plain",
        post(PREDICT, {"input": "a"}, headers={"content-type": "text/plain"}),
        None,
    ),
    ("predict +json", post(PREDICT, {"input": "a"}, headers={"content-type": "x/y+json"}), None),
    ("predict oversize", post(PREDICT, {"input": "a" * 4000}), None),
    ("predict chunked oversize", chunked(PREDICT, 4000), None),
    ("predict chunked ok", chunked(PREDICT, 10), ("m", 1)),
    ("predict no key", post(PREDICT, {"input": "a"}, headers={"authorization": ""}), None),
    (
        "predict bad key",
        post(PREDICT, {"input": "a"}, headers={"authorization": "Bearer nope"}),
        None,
    ),
    (
        "predict high for bob",
        post(PREDICT, {"input": "a", "priority": "high"}, headers=BOB_KEY),
        None,
    ),
    ("predict unknown model", post("/v1/models/nope/predict", {"input": "a"}), None),
    ("predict long model", post(f"/v1/models/{LONG_NAME}/predict", {"input": "a"}), None),
    ("predict deadline over max", post(PREDICT, {"input": "a", "deadline_ms": 10**12}), None),
    (
        "predict idempotent",
        post(PREDICT, {"input": "i"}, headers={"idempotency-key": "k1"}),
        ("m", 1),
    ),
    ("predict replay", post(PREDICT, {"input": "i"}, headers={"idempotency-key": "k1"}), None),
    ("predict key reused", post(PREDICT, {"input": "j"}, headers={"idempotency-key": "k1"}), None),
    (
        "predict bad key chars",
        post(PREDICT, {"input": "a"}, headers={"idempotency-key": "a\tb"}),
        None,
    ),
    ("submit ok", post(JOBS, {"input": "one two"}), None),
    ("submit idempotent", post(JOBS, {"input": "x"}, headers={"idempotency-key": "s1"}), None),
    ("submit replay", post(JOBS, {"input": "x"}, headers={"idempotency-key": "s1"}), None),
    ("submit webhook not https", post(JOBS, {"input": "x", "webhook": {"url": "ftp://a"}}), None),
    ("submit wrong type", post(JOBS, {"input": "x", "metadata": [1]}), None),
    ("submit to full", post("/v1/models/full/jobs", {"input": "x"}), None),
    ("submit to full again", post("/v1/models/full/jobs", {"input": "x"}), None),
    ("submit trailing slash", post(JOBS + "/", {"input": "x"}), None),
    ("embeddings ok", post(EMB, {"model": "emb", "input": ["a", "b c"]}), ("emb", 2)),
    ("embeddings base64", post(EMB, {**ONE, "encoding_format": "base64"}), ("emb", 1)),
    ("embeddings waits out", post(EMB, {"model": "slow", "input": "a"}), None),
    ("embeddings dimensions", post(EMB, {"model": "emb", "input": "a", "dimensions": 2}), None),
    ("embeddings plain model", post(EMB, {"model": "plain", "input": "a"}), None),
    ("embeddings unknown model", post(EMB, {"model": "nope", "input": "a"}), None),
    ("embeddings empty list", post(EMB, {"model": "emb", "input": []}), None),
    ("embeddings token array", post(EMB, {"model": "emb", "input": [1, 2]}), None),
    ("embeddings too many", post(EMB, {"model": "emb", "input": ["a"] * 5}), None),
    ("embeddings bad format", post(EMB, {**ONE, "encoding_format": "x"}), None),
    ("embeddings no model", post(EMB, {"input": "a"}), None),
    ("embeddings bad JSON", post(EMB, raw=b"{"), None),
    (
        "embeddings no key",
        post(EMB, {"model": "emb", "input": "a"}, headers={"authorization": ""}),
        None,
    ),
]


async def _answer(s: Side, send: Send, serve_what: tuple[str, int] | None) -> httpx.Response:
    if serve_what is None:
        return await send(s.client)
    resp, _ = await asyncio.gather(send(s.client), serve(s, *serve_what))
    return resp


def _request_counts(s: Side) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for metric in s.state.metrics.requests.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }


async def test_every_case_answers_alike_through_both_paths() -> None:
    async with side(lean=True) as lean, side(lean=False) as routed:
        for name, send, serve_what in CASES:
            got = shape(await _answer(lean, send, serve_what))
            want = shape(await _answer(routed, send, serve_what))
            assert got == want, name
        assert _request_counts(lean) == _request_counts(routed)
        # The cases reach the lean path's answers, not only its fall-through.
        assert ("status", "200") in {k[2] for k in _request_counts(lean)}


# GET /v1/jobs/{job_id}: (case, path with {queued}/{done} for the side's job ids, headers,
# method, body). Sent with Alice's key unless the headers say otherwise.
READS: list[tuple[str, str, dict[str, str], str, bytes]] = [
    ("read queued", "/v1/jobs/{queued}", {}, "GET", b""),
    ("read queued wait=0", "/v1/jobs/{queued}?wait=0", {}, "GET", b""),
    ("read queued waits out", "/v1/jobs/{queued}?wait=0.05", {}, "GET", b""),
    ("read queued wait=0.000", "/v1/jobs/{queued}?wait=0.000", {}, "GET", b""),
    ("read done", "/v1/jobs/{done}", {}, "GET", b""),
    ("read done wait", "/v1/jobs/{done}?wait=5", {}, "GET", b""),
    ("read done wait=60", "/v1/jobs/{done}?wait=60", {}, "GET", b""),
    ("read done other query", "/v1/jobs/{done}?x=1&wait=1", {}, "GET", b""),
    ("read unknown id", "/v1/jobs/{queued}x", {}, "GET", b""),
    ("read odd id", "/v1/jobs/nope", {}, "GET", b""),
    ("read spaced id", "/v1/jobs/a%20b", {}, "GET", b""),
    ("read id too long", "/v1/jobs/" + "x" * 257, {}, "GET", b""),
    ("read trailing slash", "/v1/jobs/{done}/", {}, "GET", b""),
    ("read wait=61", "/v1/jobs/{queued}?wait=61", {}, "GET", b""),
    ("read wait=60.000001", "/v1/jobs/{queued}?wait=60.000001", {}, "GET", b""),
    ("read wait=-1", "/v1/jobs/{queued}?wait=-1", {}, "GET", b""),
    ("read wait=abc", "/v1/jobs/{queued}?wait=abc", {}, "GET", b""),
    ("read wait=inf", "/v1/jobs/{queued}?wait=inf", {}, "GET", b""),
    ("read wait=nan", "/v1/jobs/{queued}?wait=nan", {}, "GET", b""),
    ("read wait=1e-2", "/v1/jobs/{queued}?wait=1e-2", {}, "GET", b""),
    ("read wait empty", "/v1/jobs/{queued}?wait=", {}, "GET", b""),
    ("read wait twice", "/v1/jobs/{done}?wait=1&wait=2", {}, "GET", b""),
    ("read with a body", "/v1/jobs/{done}", JSON, "GET", b'{"a": 1}'),
    ("read HEAD", "/v1/jobs/{done}", {}, "HEAD", b""),
    ("read as bob", "/v1/jobs/{done}", bearer(BOB), "GET", b""),
    ("read as bob waits", "/v1/jobs/{queued}?wait=0.05", bearer(BOB), "GET", b""),
    ("read no key", "/v1/jobs/{done}", {"authorization": ""}, "GET", b""),
    ("read bad key", "/v1/jobs/{done}", {"authorization": "Bearer nope"}, "GET", b""),
]


async def _read_answers(s: Side) -> list[tuple[str, Any]]:
    """Each read of READS on side ``s``, after a job left queued and one ended."""
    sent = {**JSON, **bearer(ALICE)}
    queued = await s.client.post("/v1/models/slow/jobs", json={"input": "a"}, headers=sent)
    done = await s.client.post(JOBS, json={"input": "b c"}, headers=sent)
    await serve(s, "m", 1)
    ids = {"queued": queued.json()["id"], "done": done.json()["id"]}
    out = []
    for name, path, headers, method, body in READS:
        given_headers = {k: v for k, v in {**sent, **headers}.items() if v}
        resp = await s.client.request(
            method, path.format(**ids), headers=given_headers, content=body
        )
        out.append((name, shape(resp)))
    return out


@pytest.mark.parametrize("keys", [True, False], ids=["keys", "open"])
async def test_job_reads_answer_alike_through_both_paths(keys: bool) -> None:
    async with side(lean=True, keys=keys) as lean, side(lean=False, keys=keys) as routed:
        got, want = await _read_answers(lean), await _read_answers(routed)
        for (name, g), (_, w) in zip(got, want, strict=True):
            assert g == w, name
        assert _request_counts(lean) == _request_counts(routed)
    answers = dict(got)
    assert answers["read done"][0] == 200 and answers["read done"][2]["result"]
    assert answers["read queued waits out"][2]["status"] == "queued"
    assert answers["read wait=61"][0] == answers["read id too long"][0] == 422
    assert answers["read as bob"][0] == (404 if keys else 200)


def test_the_lean_path_declares_nothing_new_in_the_schema() -> None:
    redis = fake_aioredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True)
    lean = create_app(config(), redis=redis, lean=True)
    routed = create_app(config(), redis=redis, lean=False)
    assert lean.openapi() == routed.openapi()


NAMES = st.sampled_from(["timeout", "wait"])
NUMBER = st.text(alphabet="0123456789.e+-nafi_ ", max_size=8)
QUERIES = st.one_of(
    st.text(max_size=30),
    st.builds("{}={}".format, NAMES, NUMBER),
    st.builds("{0}={1}&{0}={2}".format, NAMES, st.integers(0, 99), st.integers(0, 99)),
    st.builds("x={}&{}={}".format, NUMBER, NAMES, NUMBER),
)


@given(QUERIES)
@example("wait=-1").via("each route's lower bound")
@example("wait=-0.5").via("each route's lower bound")
@example("timeout=-1").via("each route's lower bound")
@example("timeout=0").via("each route's lower bound")
@budget(0.5, suppress_health_check=[HealthCheck.too_slow])
def test_query_numbers_take_only_what_fastapi_takes_the_same(query: str) -> None:
    """Whatever the lean path takes from a query (predict's ``?timeout=``, a job
    read's ``?wait=``), FastAPI's parsing agrees with."""
    from pydantic import TypeAdapter, ValidationError
    from starlette.datastructures import QueryParams

    from gateway.routers.jobs import MAX_WAIT_S
    from gateway.routers.models import PREDICT_MAX_TIMEOUT_S

    raw = query.encode("latin-1", "ignore")
    # The routes' own bounds: ?timeout= in (0, top] (gt=0), ?wait= in [0, top] (ge=0).
    for name, (ok, value), zero_ok in [
        ("timeout", query_timeout(raw), False),
        ("wait", query_wait(raw), True),
    ]:
        if not ok:
            continue
        given_value = QueryParams(raw.decode("latin-1")).get(name)
        if given_value is None:
            assert value == (None if name == "timeout" else 0.0)
            continue
        try:
            parsed = TypeAdapter(float).validate_python(given_value)
        except ValidationError:
            pytest.fail(f"the lean path took {name}={given_value!r}, which FastAPI refuses")
        top = PREDICT_MAX_TIMEOUT_S if name == "timeout" else MAX_WAIT_S
        assert parsed == value and (0 <= parsed if zero_ok else 0 < parsed) and parsed <= top


@pytest.mark.parametrize(
    ("vector", "ok"),
    [
        ([0.5, -1, 2**70], True),
        ([True, 1.0], True),
        ([1.0, "1"], False),
        ([None], False),
        ([], True),
    ],
)
def test_an_embedding_is_numbers_as_isinstance_says(vector: list[Any], ok: bool) -> None:
    from gateway.routers.embeddings import _numbers

    assert _numbers(vector) is ok
    assert ok == all(isinstance(v, int | float) for v in vector)


def test_fastapis_native_telemetry_is_off() -> None:
    """Not documented by Sluice, not emitted by the lean routes: off for every route
    (its provider checks were three environment lookups per request)."""
    redis = fake_aioredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True)
    telemetry = getattr(create_app(config(), redis=redis), "_native_telemetry", None)
    assert telemetry is None or not telemetry.enabled()


@pytest.mark.parametrize(
    "result",
    [
        {"embedding": [0.5, -1, 2**60, 1e-7]},
        {"embedding": [0.5, 2**70]},  # written by the json fallback: not passed through
        {"embedding": [1.0], "extra": "kept"},
        {"embedding": []},
        [1, 2],
        {"text": "a\u00e9\U0001f600"},
    ],
)
@pytest.mark.parametrize("encoding_format", ["float", "base64"])
def test_a_result_passed_through_as_stored_answers_the_same_bytes(
    result: Any, encoding_format: str
) -> None:
    from gateway.responses import Json
    from gateway.routers.embeddings import embedding_of, encode, vector_of
    from gateway.schemas import EmbeddingsRequest
    from gateway.service import job_view
    from sluice import fastjson
    from sluice.records import JobField as J

    text = fastjson.dumps(result)
    rec = JobRecord.from_hash("emb", {J.ID: "j", J.STATUS: "succeeded", J.RESULT: text})
    assert (rec.result_json is not None) == (not text.startswith(" "))
    assert Json(job_view(rec)).body == Json(rec.view()).body
    if isinstance(result, dict) and "embedding" in result:
        body = EmbeddingsRequest(model="emb", input="x", encoding_format=encoding_format)
        want = encode(vector_of("emb", rec), encoding_format)
        assert Json([embedding_of(body, rec)]).body == Json([want]).body


def test_a_passed_through_result_survives_the_json_modules_fallback() -> None:
    import orjson

    from gateway.responses import Json

    lone = "\ud800"  # orjson refuses it: the json module writes the answer
    got = Json({"result": orjson.Fragment('{"a":[1.5]}'), "metadata": lone}).body
    assert got == Json({"result": {"a": [1.5]}, "metadata": lone}).body
    assert json.loads(got)["result"] == {"a": [1.5]}
