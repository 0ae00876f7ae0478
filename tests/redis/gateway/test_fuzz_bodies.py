"""Hypothesis strategies of our own against the served gateway (fakeredis and real Redis).

Arbitrary JSON values, random bytes, random content types and headers, random job
ids: never a 5xx, never a hang (each request has a timeout), every error in the
one error body; an accepted job can be read back. And a property the schema
fuzz cannot state: any valid body with one poison inserted (NaN, infinities,
an out-of-range number, a duplicate key, a bad UTF-8 byte, nesting past the
limit) is refused as ``invalid_json``, wherever the poison sits.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.strict_json import MAX_DEPTH
from sluice.local.redis_server import RedisServer
from tests.conftest import gateway_kinds
from tests.kit.fuzz_gateway import FUZZ_LIMIT, serve

# Shares of the hypothesis profile's budget (`ci`: 300 on fakeredis, 50 on a real
# server; `fast` 30 and 5; `thorough` 3000 and 500).
EXAMPLES = {"fake": 3.0, "real": 0.5}
TIMEOUT_S = 5.0
ROUTES = [
    "/v1/models/m/jobs",
    "/v1/models/t/jobs",
    "/v1/models/m/jobs/batch",
    "/v1/models/m/predict",
    "/v1/models/nope/jobs",
]
CONTENT_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "application/vnd.sluice+json",
    "application/json; charset=latin-1",
    "text/plain",
    "text/json",
    "application/xml",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "",
    "*/*",
    "application/json; boundary=",
    ";;;",
    "APPLICATION/JSON",
]


@pytest.fixture(scope="module", params=gateway_kinds())
def gw(request: pytest.FixtureRequest) -> Iterator[tuple[str, httpx.Client]]:
    url = None
    if request.param == "real":
        server: RedisServer = request.getfixturevalue("redis_server")
        url = server.url
    with serve(url) as base, httpx.Client(base_url=base, timeout=TIMEOUT_S) as client:
        yield request.param, client


def fuzz(kind: str) -> Any:
    return settings(
        max_examples=max(5, round(settings.default.max_examples * EXAMPLES[kind])),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
json_values = st.recursive(
    scalars,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=15,
)
texts = st.text(max_size=80)
# Mostly valid requests (so the accept path is fuzzed too), then noisy ones.
spec = {
    "priority": st.sampled_from(["high", "normal", "low"]),
    "deadline_ms": st.integers(1, 3_600_000),
    "metadata": st.dictionaries(st.text(max_size=8), json_values, max_size=3),
}
good_jobs = st.fixed_dictionaries({"input": texts}, optional=spec)
good_batches = st.fixed_dictionaries(
    {"inputs": st.lists(texts, min_size=1, max_size=20)}, optional=spec
)
bodies = st.fixed_dictionaries(
    {"input": texts | json_values},
    optional={
        "priority": st.sampled_from(["high", "normal", "low"]) | st.text(max_size=8),
        "deadline_ms": st.integers(-5, 10**7) | st.floats(allow_nan=False) | st.text(max_size=5),
        "metadata": st.dictionaries(st.text(max_size=8), json_values, max_size=3) | json_values,
        "inputs": st.lists(texts, max_size=20),
        "extra": json_values,
    },
)

requests = (
    st.tuples(st.sampled_from(ROUTES[:2] + ROUTES[3:4]), good_jobs)
    | st.tuples(st.just(ROUTES[2]), good_batches)
    | st.tuples(st.sampled_from(ROUTES), bodies | json_values)
)


def check_answer(client: httpx.Client, resp: httpx.Response) -> None:
    assert resp.status_code < 500, resp.text
    if resp.status_code >= 400:
        assert set(resp.json()["error"]) == {"type", "message"}, resp.text
    elif resp.status_code in (200, 202) and "id" in resp.json():
        job = client.get(f"/v1/jobs/{resp.json()['id']}")
        assert job.status_code == 200 and job.json()["id"] == resp.json()["id"]


def test_arbitrary_json_bodies(gw: tuple[str, httpx.Client]) -> None:
    kind, client = gw

    @given(request=requests, key=st.none() | texts)
    @fuzz(kind)
    def check(request: tuple[str, Any], key: str | None) -> None:
        route, body = request
        headers = {"content-type": "application/json"}
        if key is not None:
            headers["idempotency-key"] = quote(key)  # header values must be latin-1
        resp = client.post(route, content=json.dumps(body).encode(), headers=headers)
        check_answer(client, resp)

    check()


def test_random_bytes_and_content_types(gw: tuple[str, httpx.Client]) -> None:
    kind, client = gw

    @given(
        route=st.sampled_from(ROUTES),
        raw=st.binary(max_size=300),
        ctype=st.sampled_from(CONTENT_TYPES) | st.text("abjson/+;= -", max_size=30).map(str.strip),
    )
    @fuzz(kind)
    def check(route: str, raw: bytes, ctype: str) -> None:
        resp = client.post(route, content=raw, headers={"content-type": ctype})
        check_answer(client, resp)
        if resp.status_code == 415:
            assert resp.json()["error"]["type"] == "unsupported_media_type"

    check()


def test_random_job_ids_and_waits(gw: tuple[str, httpx.Client]) -> None:
    kind, client = gw

    @given(
        job_id=st.text(min_size=1, max_size=300),
        wait=st.none() | st.floats() | st.text(max_size=12) | st.integers(-(10**400), 10**400),
        method=st.sampled_from(["GET", "DELETE"]),
    )
    @fuzz(kind)
    def check(job_id: str, wait: Any, method: str) -> None:
        params = {} if wait is None or method == "DELETE" else {"wait": str(wait)}
        path = "/v1/jobs/" + quote(job_id, safe="")
        resp = client.request(method, path, params=params)
        assert resp.status_code in (404, 422), resp.text  # no job by such an id exists
        assert set(resp.json()["error"]) == {"type", "message"}

    check()


POISONS = st.sampled_from(
    [
        "NaN",
        "Infinity",
        "-Infinity",
        "1e400",
        "-1e999",
        str(2**64),
        "9" * 30,
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
    ]
)


def test_any_valid_body_with_one_poison_is_invalid_json(gw: tuple[str, httpx.Client]) -> None:
    kind, client = gw
    marker = "\u2603POISON\u2603"  # a string that cannot occur by chance

    @given(
        body=bodies,
        poison=POISONS,
        where=st.integers(0, 10**6),
        kind_of=st.sampled_from(["value", "duplicate", "utf8"]),
    )
    @fuzz(kind)
    def check(body: dict[str, Any], poison: str, where: int, kind_of: str) -> None:
        raw = _poisoned(body, poison, where, kind_of, marker)
        if len(raw) > FUZZ_LIMIT:
            return
        resp = client.post(
            "/v1/models/m/jobs", content=raw, headers={"content-type": "application/json"}
        )
        assert resp.status_code == 422, (raw[:200], resp.text)
        assert resp.json()["error"]["type"] == "invalid_json", resp.text

    check()


def _poisoned(body: dict[str, Any], poison: str, where: int, kind_of: str, marker: str) -> bytes:
    """The body as JSON with one poison: a value slot, a duplicated key or a bad byte."""
    if kind_of == "duplicate":  # every body has "input": say it twice
        return ('{"input": 1, ' + json.dumps(body)[1:]).encode()
    slots = _value_slots(body)
    path = slots[where % len(slots)]
    text = json.dumps(_replace(body, path, marker)).replace(json.dumps(marker), poison, 1)
    if kind_of == "utf8":
        # a lone continuation byte inside the first string of the body
        return text.replace(poison, '"x"', 1).encode().replace(b'"', b'"\x80', 1)
    return text.encode()


def _value_slots(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    slots = [path] if path else []
    if isinstance(value, dict):
        for k, v in value.items():
            slots += _value_slots(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            slots += _value_slots(v, (*path, i))
    return slots


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: (_replace(v, rest, new) if k == head else v) for k, v in value.items()}
    return [(_replace(v, rest, new) if i == head else v) for i, v in enumerate(value)]
