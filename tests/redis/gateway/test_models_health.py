"""GET /v1/models, health, readiness, metrics; Redis down or hung answers 503 promptly."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from gateway.app import create_app
from tests.kit.gateway import Harness, gateway_config
from tests.waits import HUNG_S


async def test_models_lists_buckets_depth_cost_and_workers(gw: Harness) -> None:
    await gw.client.post("/v1/models/m/jobs/batch", json={"inputs": ["a b", "c " * 100]})
    await gw.heartbeat("m", "ready")
    await gw.heartbeat("m", "starting")
    resp = await gw.client.get("/v1/models")
    assert resp.status_code == 200
    assert resp.json()["object"] == "list"
    models = {m["id"]: m for m in resp.json()["data"]}
    assert set(models) == {"m", "pinned"}
    assert all(m["name"] == m["id"] and m["object"] == "model" for m in models.values())
    m = models["m"]
    assert [(b["bucket"], b["queued"], b["queued_cost"]) for b in m["buckets"]] == [
        ("32", 1, 2),
        ("128", 1, 100),
        ("512", 0, 0),
    ]
    assert m["queued"] == 2 and m["queued_cost"] == 102 and m["scales_from_zero"] is True
    assert m["workers"] == {
        "starting": 1,
        "standby": 0,
        "ready": 1,
        "draining": 0,
        "quarantined": 0,
    }
    assert models["pinned"]["workers"]["ready"] == 0


async def test_the_openai_client_lists_the_models(gw: Harness) -> None:
    """OpenAI's list shape, which ``client.models.list()`` parses; Sluice's fields
    ride along in each entry (the client keeps unknown fields as extras)."""
    await gw.heartbeat("m", "ready")
    async with httpx.AsyncClient(transport=gw.client._transport, base_url="http://gw") as http:
        client = openai.AsyncOpenAI(
            base_url="http://gw/v1", api_key="unused", http_client=http, max_retries=0
        )
        page = await client.models.list()
        listed = [m async for m in page]
    assert [m.id for m in listed] == ["m", "pinned"]
    for m in listed:
        assert m.object == "model" and m.owned_by == "sluice"
        assert isinstance(m.created, int) and 0 < m.created <= time.time()
    extra = listed[0].model_extra or {}
    assert extra["workers"]["ready"] == 1 and extra["handler"] == "synthetic"


async def test_health_ready_and_metrics_from_the_snapshot(gw: Harness) -> None:
    assert (await gw.client.get("/healthz")).json() == {"status": "ok"}
    ready = await gw.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["redis"] is True
    await gw.client.post("/v1/models/m/jobs", json={"input": "a b c", "priority": "low"})
    await gw.refresh()
    text = (await gw.client.get("/metrics")).text
    assert 'sluice_jobs_submitted_total{bucket="32",model="m",priority="low"} 1.0' in text
    assert 'sluice_queue_depth{bucket="32",model="m"} 1.0' in text
    assert 'sluice_queue_cost{bucket="32",model="m"} 3.0' in text
    route = 'route="/v1/models/{model}/jobs",status="202"'
    assert f'sluice_http_requests_total{{method="POST",{route}}} 1.0' in text
    assert "/v1/models/m/jobs" not in text.replace("{model}", "")  # templates, never raw paths


# Overrides the conftest's fake/real parametrisation of ``kind``: these tests need
# a real server, so they do not run (nor skip) on fakeredis.
REAL_REDIS_ONLY = pytest.mark.parametrize("kind", ["real"])
QUIET = gateway_config(gateway={"stats_refresh_s": 60})  # no background read during a test


@REAL_REDIS_ONLY  # counts commands with INFO commandstats on a real server
async def test_metrics_scrape_costs_no_redis_round_trip(make_gateway) -> None:  # type: ignore[no-untyped-def]
    async with make_gateway(QUIET) as gw:
        await _scrapes_send_nothing(gw)


async def _scrapes_send_nothing(gw: Harness) -> None:
    await gw.refresh()

    async def calls() -> int:
        info = await gw.redis.info("commandstats")
        return sum(v["calls"] for k, v in info.items() if k != "cmdstat_info")

    before = await calls()
    for _ in range(20):
        assert (await gw.client.get("/metrics")).status_code == 200
    assert await calls() - before == 0


@REAL_REDIS_ONLY  # counts commands with INFO commandstats on a real server
async def test_long_poll_sends_no_redis_command_while_it_waits(make_gateway) -> None:  # type: ignore[no-untyped-def]
    async with make_gateway(QUIET) as gw:
        await _long_poll_sends_nothing(gw)


async def _long_poll_sends_nothing(gw: Harness) -> None:
    job_id = (await gw.client.post("/v1/models/m/jobs", json={"input": "x"})).json()["id"]
    info = await gw.redis.info("commandstats")
    before = info.get("cmdstat_hgetall", {}).get("calls", 0)
    resp = await gw.client.get(f"/v1/jobs/{job_id}", params={"wait": 1.0})
    assert resp.json()["status"] == "queued"
    info = await gw.redis.info("commandstats")
    # One read before sleeping and one after the timeout, nothing in between.
    assert info["cmdstat_hgetall"]["calls"] - before == 2


@pytest.fixture
def blackhole() -> Iterator[int]:
    """A TCP port that accepts connections and never answers (a hung Redis)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    yield srv.getsockname()[1]
    srv.close()


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


REDIS_TIMEOUT_S = 0.3
# Did not hang: 30x the Redis timeout, so a loaded machine passes; a gateway that
# does not bound its Redis calls never answers a hung Redis (cut at HUNG_S), and the
# long-poll below would otherwise wait its 60 s.
ANSWER_BOUND_S = 30 * REDIS_TIMEOUT_S


@pytest.mark.parametrize("where", ["closed", "hung"])
async def test_redis_down_or_hung_is_503_within_the_timeout(where: str, blackhole: int) -> None:
    port = blackhole if where == "hung" else closed_port()
    cfg = gateway_config(gateway={"redis_timeout_s": REDIS_TIMEOUT_S})
    app = create_app(cfg, f"redis://127.0.0.1:{port}/0")
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
            for method, path, body in [
                ("POST", "/v1/models/m/jobs", {"input": "x"}),
                ("GET", "/v1/jobs/m.abc?wait=60", None),
                ("DELETE", "/v1/jobs/m.abc", None),
                ("GET", "/v1/models", None),
                ("GET", "/readyz", None),
            ]:
                started = time.perf_counter()
                resp = await asyncio.wait_for(c.request(method, path, json=body), HUNG_S)
                elapsed = time.perf_counter() - started
                assert resp.status_code == 503, (path, resp.text)
                assert resp.json()["error"]["type"] in ("redis_unavailable", "not_ready")
                assert elapsed < ANSWER_BOUND_S, f"{path} took {elapsed:.2f}s"
            assert (await c.get("/healthz")).status_code == 200


@REAL_REDIS_ONLY  # the pool belongs to the real client
async def test_a_burst_past_the_pool_waits_instead_of_failing(make_gateway) -> None:  # type: ignore[no-untyped-def]
    cfg = gateway_config(gateway={"redis_max_connections": 2})
    async with make_gateway(cfg) as gw:
        replies = await asyncio.gather(
            *(gw.client.post("/v1/models/m/jobs", json={"input": f"x {i}"}) for i in range(40))
        )
        assert [r.status_code for r in replies] == [202] * 40
        assert (await gw.queue.stats("m")).queued == 40
