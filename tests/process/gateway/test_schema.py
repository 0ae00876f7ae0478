"""The real process: `sluice gateway` under uvicorn, and a schemathesis run with no 5xx."""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import Iterator

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from sluice.local.children import Children
from sluice.local.redis_server import RedisServer
from tests.kit.gateway import error_keys, waited_out
from tests.kit.http import HTTP

CONFIG = {
    "models": {
        "m": {"handler": "synthetic", "autoscaling": {"min_replicas": 0}},
        "t": {
            "handler": "embedding",
            "cost": {"method": "tokenizer"},
            "autoscaling": {"min_replicas": 0},
        },
    },
    "gateway": {"predict_timeout_s": 0.2, "max_body_bytes": 65536},
}


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def gateway_url(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    cfg = tmp_path_factory.mktemp("gw") / "sluice.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    port = free_port()
    children = Children(cfg.parent / "logs", env={**os.environ, "HF_HUB_OFFLINE": "1"})
    args = ["gateway", "--config", str(cfg), "--port", str(port), "--redis-url", redis_server.url]
    children.spawn("gateway", args)
    url = f"http://127.0.0.1:{port}"
    try:
        children.wait_http(f"{url}/readyz", 30, "the CLI's gateway")
        yield url
    finally:
        children.stop(children.all, timeout_s=10)


def test_cli_gateway_serves_with_the_tokenizer_cost(gateway_url: str) -> None:
    resp = HTTP.post(f"{gateway_url}/v1/models/t/jobs", json={"input": "Hello, world!"})
    assert resp.status_code == 202
    # MiniLM's tokenizer: [CLS] hello , world ! [SEP] = 6 tokens (4 words would say 2).
    assert resp.json()["cost"] == 6 and resp.json()["bucket"] == "32"
    job = HTTP.get(f"{gateway_url}{resp.headers['location']}").json()
    assert job["status"] == "queued" and job["model"] == "t"


def test_no_5xx_for_any_request_the_schema_allows(gateway_url: str) -> None:
    # schemathesis's pytest plugin does not run under pytest 9, so each operation's
    # strategy is driven through hypothesis directly (bounded examples). This one runs
    # the CLI's gateway process; test_fuzz_schema.py fuzzes harder in process.
    schema = schemathesis.openapi.from_url(f"{gateway_url}/openapi.json")
    seen = 0
    for result, mode in itertools.product(schema.get_all_operations(), GenerationMode):
        op = result.ok()

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(
            max_examples=5,  # 10 took 32 s in `make test`; the in-process fuzz goes deeper
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case) -> None:  # type: ignore[no-untyped-def]
            # A valid `GET .../events` is an endless event stream, which schemathesis
            # reads until the read timeout has passed in all: 5 s, not 10, for those.
            events = case.operation.path.endswith("/events")
            resp = case.call(timeout=(10, 5) if events else 10)
            path = case.formatted_path
            ok_5xx = waited_out(path, resp)  # no worker runs here: a valid embedding waits out
            assert resp.status_code < 500 or ok_5xx, (case.method, path, resp.text)
            if resp.status_code >= 400:
                assert set(resp.json()["error"]) == error_keys(path)

        try:
            check()
        except Unsatisfiable:  # no invalid request exists (e.g. GET /healthz has no input)
            assert mode is GenerationMode.NEGATIVE
            continue
        seen += 1
    assert seen >= 14  # every route; those with inputs also with invalid requests
