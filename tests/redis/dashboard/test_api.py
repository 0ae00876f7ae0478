"""The dashboard's JSON (and page, assets) through the app, on fakeredis and a real Redis."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from sluice import keys
from sluice.jobs import NewJob, Outcome
from sluice.waits import window_start
from tests.kit.gateway import Harness, gateway_config

pytestmark = pytest.mark.asyncio(loop_scope="function")


async def _state(h: Harness) -> dict[str, Any]:
    resp = await h.client.get("/dashboard/api/state")
    assert resp.status_code == 200, resp.text
    assert resp.headers["cache-control"] == "no-store"
    return {m["name"]: m for m in resp.json()["models"]}


async def _seed(h: Harness) -> None:
    """Queued jobs in two buckets, one done, one dead-lettered, a worker, a decision."""
    subs = await h.queue.submit("m", [NewJob(input="a", bucket="32", cost=3) for _ in range(4)])
    await h.queue.submit("m", [NewJob(input="b", bucket="512", cost=300)])
    batch = await h.queue.claim("m", "w-ready", max_batch=2, buckets=["32"])
    await h.queue.complete(
        "m",
        [
            Outcome.ok(batch.jobs[0].id, 1),
            Outcome.fail(batch.jobs[1].id, "bad_input", "no <b>bold</b>"),
        ],
    )
    await h.heartbeat("m", "ready", rate=412.5)
    await h.redis.hset(
        keys.scale_state_key("m"),
        mapping={
            "at_ms": int(time.time() * 1000),
            "current": 1,
            "desired": 2,
            "reason": "backlog",
            "needed": 1.7,
            "ready": 1,
            "starting": 0,
            "queued": 3,
            "p99_wait_ms": "",
            "period_s": 5,
        },
    )
    await h.redis.lpush(
        keys.decisions_key("m"),
        json.dumps({"at_ms": 1, "current": 1, "desired": 2, "reason": "backlog"}),
    )
    assert len(subs) == 4


async def test_state_reflects_seeded_redis(make_gateway) -> None:  # noqa: F811
    async with make_gateway() as h:
        await _seed(h)
        m = (await _state(h))["m"]
    assert [(b["bucket"], b["queued"], b["queued_cost"]) for b in m["buckets"]] == [
        ("32", 2, 6),
        ("128", 0, 0),
        ("512", 1, 300),
    ]
    assert (m["queued"], m["queued_cost"], m["in_flight"]) == (3, 306, 0)
    assert m["counters"]["succeeded"] == 1 and m["counters"]["failed"] == 1
    assert m["workers"]["by_state"]["ready"] == 1 and m["workers"]["total"] == 1
    [w] = m["workers"]["list"]
    assert (w["id"], w["state"], w["device"]) == ("w-ready", "ready", "cpu")
    assert w["service_rate"] == 412.5
    assert "batch_size" in w and m["max_batch"] == 32
    assert m["latency"]["wait"]["count"] == 2 and m["latency"]["e2e"]["count"] == 1
    assert m["latency"]["wait"]["p99_ms"] is not None and m["slo_wait_ms"] == 1000
    latest = m["autoscaler"]["latest"]
    assert (latest["current"], latest["desired"], latest["reason"]) == (1, 2, "backlog")
    assert latest["p99_wait_ms"] is None and latest["age_s"] < 60
    assert [d["reason"] for d in m["autoscaler"]["decisions"]] == ["backlog"]
    assert m["dead_letters"]["count"] == 1
    [dead] = m["dead_letters"]["recent"]
    assert (dead["type"], dead["message"]) == ("bad_input", "no <b>bold</b>")
    assert dead["at_ms"] is not None and dead["attempts"] == 1


async def test_webhook_deliveries_show_with_the_dead_letters(make_gateway) -> None:  # noqa: F811
    from sluice.jobs import Webhook
    from sluice.webhooks.ops import WebhookOps
    from sluice.webhooks.ops import scripts as webhook_scripts

    async with make_gateway() as h:
        assert (await _state(h))["m"]["webhooks"] == {
            "pending": 0, "due": 0, "oldest_due_s": 0.0, "dead": 0,
        }  # fmt: skip
        hook = Webhook("https://hooks.example/x")
        await h.queue.submit("m", [NewJob(input="a", bucket="32", cost=3, webhook=hook)])
        await h.queue.submit("m", [NewJob(input="b", bucket="32", cost=3, webhook=hook)])
        batch = await h.queue.claim("m", "w1", max_batch=2)
        await h.queue.complete("m", [Outcome.ok(j.id, 1) for j in batch.jobs], "w1")
        m = await _webhooks_when(h, lambda w: w["pending"] == 2)  # the page's cache ages out
        assert (m["pending"], m["due"], m["dead"]) == (2, 2, 0)
        h.queue.register(webhook_scripts())
        ops = WebhookOps(["m", "pinned"])
        claimed = await h.queue.run(ops.claim("m", "n1", 60_000, 1))
        await h.queue.run(ops.done(claimed[0], "dead", status=410, error="gone"))
        m = await _webhooks_when(h, lambda w: w["dead"] == 1)
        assert (m["pending"], m["due"], m["dead"]) == (1, 1, 1)


async def _webhooks_when(h: Harness, cond: Any) -> dict[str, Any]:
    from tests.waits import async_wait_until

    async def look() -> dict[str, Any] | None:
        w = (await _state(h))["m"]["webhooks"]
        return w if cond(w) else None

    return await async_wait_until(look, what="the dashboard's webhook counts")


async def test_empty_model_has_nulls_not_errors(make_gateway) -> None:  # noqa: F811
    async with make_gateway() as h:
        m = (await _state(h))["pinned"]
    assert m["queued"] == 0 and m["workers"]["list"] == []
    assert m["latency"]["wait"] == {"p50_ms": None, "p99_ms": None, "count": 0}
    assert m["autoscaler"] == {"latest": None, "decisions": []}
    assert m["rates"] is None  # one sample: no rate yet


async def test_concurrent_viewers_share_one_redis_read(make_gateway) -> None:  # noqa: F811
    async with make_gateway() as h:
        await _state(h)
        feed = h.client._transport.app.state.dashboard_feed  # type: ignore[attr-defined]
        before = feed.refreshes
        feed._cached_at = 0.0  # expire the cache: the next ten requests need one refresh
        bodies = await asyncio.gather(*(h.client.get("/dashboard/api/state") for _ in range(10)))
        assert all(b.status_code == 200 for b in bodies)
        assert feed.refreshes == before + 1
        assert len({b.text for b in bodies}) == 1


async def test_rates_come_from_counter_deltas(make_gateway) -> None:  # noqa: F811
    async with make_gateway() as h:
        await _state(h)  # makes the feed
        feed = h.client._transport.app.state.dashboard_feed  # type: ignore[attr-defined]
        wall = [time.time()]
        feed.wall = lambda: wall[0]  # the feed's clock for samples: two reads 2 s apart
        feed._samples["m"].clear()
        feed._cached_at = 0.0
        assert (await _state(h))["m"]["rates"] is None  # one sample: no rate yet
        await h.queue.submit("m", [NewJob(input="a", bucket="32", cost=1) for _ in range(6)])
        wall[0] += 2.0
        feed._cached_at = 0.0
        m = (await _state(h))["m"]
    # 6 arrivals between two samples 2 s apart
    assert m["rates"]["arrived"] == 3.0 and m["rates"]["succeeded"] == 0


async def test_latency_percentiles_from_histograms(make_gateway) -> None:  # noqa: F811
    async with make_gateway() as h:
        now = time.time()
        # 100 claims: 90 waited <= 10 ms, 10 waited 250-500 ms; e2e all 1-2.5 s
        await h.redis.hset(
            keys.wait_hist_key("m", window_start(now)), mapping={"10": 90, "500": 10, "count": 100}
        )
        await h.redis.hset(
            keys.e2e_hist_key("m", window_start(now)), mapping={"2500": 100, "count": 100}
        )
        m = (await _state(h))["m"]
    wait, e2e = m["latency"]["wait"], m["latency"]["e2e"]
    assert wait["count"] == 100 and 5 < wait["p50_ms"] <= 10 and 250 < wait["p99_ms"] <= 500
    assert 1000 < e2e["p50_ms"] < e2e["p99_ms"] <= 2500


async def test_page_and_assets_are_served_offline(make_gateway) -> None:  # noqa: F811
    async with make_gateway() as h:
        page = await h.client.get("/dashboard")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "default-src 'self'" in page.headers["content-security-policy"]
        html = page.text
        srcs = [part.split('"')[1] for part in html.split("src=")[1:]]
        srcs += [part.split('"')[1] for part in html.split('rel="stylesheet" href=')[1:]]
        assert len(srcs) >= 5
        for src in srcs:
            assert src.startswith("/dashboard/static/"), src  # nothing from another host
            resp = await h.client.get(src)
            assert resp.status_code == 200 and len(resp.content) > 500, src
            assert (
                resp.headers["content-security-policy"] == page.headers["content-security-policy"]
            ), src  # also the page reached as a static file
        same_page = await h.client.get("/dashboard/static/index.html")
        assert "default-src 'self'" in same_page.headers["content-security-policy"]
        vendored = await h.client.get("/dashboard/static/vendor/uplot-1.6.32/LICENSE")
        assert vendored.status_code == 404  # only the allowed file types
        for bad in ("../routes.py", "..%2froutes.py", "nope.js", "vendor/../../feed.py"):
            assert (await h.client.get(f"/dashboard/static/{bad}")).status_code == 404, bad


async def test_redis_down_is_a_quick_503_with_the_error_body() -> None:
    import httpx

    from gateway.app import create_app
    from sluice.local.redis_server import free_port

    cfg = gateway_config(gateway={"redis_timeout_s": 0.3})
    app = create_app(cfg, f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
            started = time.monotonic()
            resp = await c.get("/dashboard/api/state")
            assert resp.status_code == 503
            assert resp.json()["error"]["type"] == "redis_unavailable"
            assert time.monotonic() - started < 30 * 0.3  # did not hang: 30x the timeout
            assert (await c.get("/dashboard")).status_code == 200  # the page still loads


async def test_history_has_finished_windows_only(make_gateway) -> None:  # noqa: F811
    async with make_gateway() as h:
        await _state(h)  # makes the feed; its clock is then pinned (no window edge mid-test)
        now = time.time()
        h.client._transport.app.state.dashboard_feed.wall = lambda: now  # type: ignore[attr-defined]
        old, older, current = window_start(now) - 30, window_start(now) - 60, window_start(now)
        await h.redis.hset(keys.e2e_hist_key("m", old), mapping={"100": 50, "count": 50})
        await h.redis.hset(keys.wait_hist_key("m", old), mapping={"10": 50, "count": 50})
        await h.redis.hset(keys.wait_hist_key("m", older), mapping={"5": 2, "count": 2})
        await h.redis.hset(keys.e2e_hist_key("m", current), mapping={"5": 9, "count": 9})
        resp = await h.client.get("/dashboard/api/history")
        assert resp.status_code == 200
        body = resp.json()
    points = body["models"]["m"]
    assert body["window_s"] == 10 and body["models"]["pinned"] == []
    assert [p["t_s"] for p in points] == [older + 5, old + 5]  # not the filling window
    assert points[1]["succeeded_per_s"] == 5.0 and 50 < points[1]["e2e_p99_ms"] <= 100
    assert points[0]["succeeded_per_s"] == 0 and points[0]["e2e_p50_ms"] is None


async def test_every_dashboard_route_is_under_the_admin_prefix() -> None:
    # The access control (gateway/auth.py) covers /dashboard by path prefix: a route
    # added outside it would be public.
    from gateway.auth import is_admin_path
    from gateway.dashboard import router

    paths = [route.path for route in router.routes]  # type: ignore[attr-defined]
    assert "/dashboard/api/state" in paths and len(paths) >= 4
    assert all(p == "/dashboard" or p.startswith("/dashboard/") for p in paths), paths
    assert all(is_admin_path(p) for p in paths)


async def test_verdict_is_in_the_state(make_gateway) -> None:  # noqa: F811
    async with make_gateway() as h:
        await h.queue.submit("m", [NewJob(input="a", bucket="32", cost=1)])
        models = await _state(h)
    # a queued job and no worker at all
    assert models["m"]["verdict"] == {
        "level": "bad",
        "text": "No workers",
        "why": "1 queued and no worker ready or starting",
    }
    assert models["pinned"]["verdict"]["level"] == "idle"
