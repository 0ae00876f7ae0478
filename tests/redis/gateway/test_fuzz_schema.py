"""Schemathesis over every operation of the OpenAPI schema, valid and invalid requests.

Extends test_schema.py (which runs the CLI process on a real Redis): here the
app is served in-process, on fakeredis with more examples and on a real Redis
with fewer; path, query and header parameters (Idempotency-Key, wait, timeout)
are all generated from the schema; every response must be no 5xx, have a status
the schema declares, and a body that validates against the schema.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sluice.local.redis_server import RedisServer
from tests.conftest import gateway_kinds
from tests.kit.fuzz_gateway import serve
from tests.kit.gateway import error_keys, waited_out

# Per operation and generation mode, as shares of the hypothesis profile's budget
# (`ci`: 30 on fakeredis, 8 on a real server; `fast` 5 each, so `make test-fast`
# stays inside the 60 s timeout on a loaded machine; `thorough` 300 and 80).
EXAMPLES = {"fake": 0.3, "real": 0.08}
# Operator routes (docs/adr/0151) get a third: each is a thin layer over the same
# validation, and there are many of them (dead letters, purges, pause, audit).
ADMIN_PATHS = ("/v1/admin/", "/v1/jobs/{job_id}/retry")
ADMIN_SHARE = 1 / 3


def examples(kind: str, path: str = "") -> int:
    share = EXAMPLES[kind] * (ADMIN_SHARE if path.startswith(ADMIN_PATHS) else 1)
    return max(5, round(settings.default.max_examples * share))


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module", params=gateway_kinds())
def served(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    url = None
    if request.param == "real":
        server: RedisServer = request.getfixturevalue("redis_server")
        url = server.url
    with serve(url) as base:
        yield request.param, base


def _run(op: Any, mode: GenerationMode, base: str, examples: int) -> bool:
    """Fuzz one operation; False when no request of this mode exists for it."""

    @given(case=op.as_strategy(generation_mode=mode))
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        # A hang fails the test, bounded. A valid `GET .../events` is an endless event
        # stream, which schemathesis reads until the read timeout has passed in all:
        # 2 s of it, not 5 (three such streams were 15 s of this test's 22).
        events = op.path.endswith("/events")
        resp = case.call(base_url=base, timeout=(5, 2) if events else 5)
        path = case.formatted_path
        timed_out = waited_out(path, resp)
        assert resp.status_code < 500 or timed_out, (case.method, path, resp.text)
        checks = CHECKS[1:] if timed_out else CHECKS  # the rest hold for the 504 too
        case.validate_response(resp, checks=checks)  # invalid requests get declared answers too
        if resp.status_code >= 400 and path != "/readyz":
            assert set(resp.json()["error"]) == error_keys(path), resp.text

    try:
        check()
    except Unsatisfiable:
        return False
    return True


# schemathesis's own strategies draw from the `random` module for some bodies;
# hypothesis warns about that the first time only, so as an error it failed one
# example and then not its replay (FlakyFailure). Not ours to change.
@pytest.mark.filterwarnings(
    "ignore:Do not use the .random. module inside strategies"
    ":hypothesis.errors.HypothesisDeprecationWarning"
)
def test_every_operation_fuzzed_from_the_schema(served: tuple[str, str]) -> None:
    kind, base = served
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    ops = [r.ok() for r in schema.get_all_operations()]
    covered: set[tuple[str, str, str]] = set()
    for op, mode in itertools.product(ops, GenerationMode):
        if _run(op, mode, base, examples(kind, op.path)):
            covered.add((op.method.upper(), op.path, mode.value))
        else:  # only an operation with no input has no invalid request
            assert mode is GenerationMode.NEGATIVE and not op.definition.raw.get("parameters")
    positive = {(m, p) for m, p, mode in covered if mode == GenerationMode.POSITIVE.value}
    assert positive == {(o.method.upper(), o.path) for o in ops}  # every route and method
    negative = {(m, p) for m, p, mode in covered if mode == GenerationMode.NEGATIVE.value}
    assert {("POST", "/v1/models/{model}/jobs"), ("GET", "/v1/jobs/{job_id}")} <= negative


def test_the_schema_documents_the_fuzzed_parameters(served: tuple[str, str]) -> None:
    _, base = served
    raw = schemathesis.openapi.from_url(f"{base}/openapi.json").raw_schema
    params = {
        (method.upper(), path, p["in"], p["name"])
        for path, item in raw["paths"].items()
        for method, op in item.items()
        for p in op.get("parameters", [])
    }
    for route in (
        "/v1/models/{model}/jobs",
        "/v1/models/{model}/jobs/batch",
        "/v1/models/{model}/predict",
    ):
        assert ("POST", route, "header", "Idempotency-Key") in params
    assert ("GET", "/v1/jobs/{job_id}", "query", "wait") in params
    assert ("POST", "/v1/models/{model}/predict", "query", "timeout") in params
