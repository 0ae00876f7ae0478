"""API keys at the gateway: 401/403, ownership (404 for others), per-key 429, admin routes."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.auth import Listener
from sluice.apikeys import hash_key
from sluice.jobs import Outcome
from tests.kit.security import ALICE, BOB, ROOT, bearer, keyed_config

pytestmark = pytest.mark.asyncio(loop_scope="function")
JOB = {"input": "hello there"}


async def submit(g, key: str):  # type: ignore[no-untyped-def]
    return await g.client.post("/v1/models/m/jobs", json=JOB, headers=bearer(key))


async def code(g, method: str, path: str, key: str) -> int:  # type: ignore[no-untyped-def]
    return int((await g.client.request(method, path, headers=bearer(key))).status_code)


async def test_every_v1_route_needs_a_key_and_answers_401_with_the_scheme(make_gw) -> None:
    async with make_gw() as g:
        for method, path in [
            ("POST", "/v1/models/m/jobs"),
            ("POST", "/v1/models/m/jobs/batch"),
            ("GET", "/v1/jobs/m.123"),
            ("DELETE", "/v1/jobs/m.123"),
            ("POST", "/v1/models/m/predict"),
            ("GET", "/v1/models"),
        ]:
            for headers in (
                {},
                bearer("sk_wrong"),
                {"X-API-Key": "sk_wrong"},
                {"Authorization": f"Basic {ALICE}"},
            ):
                r = await g.client.request(method, path, json=JOB, headers=headers)
                assert r.status_code == 401, (method, path, headers, r.text)
                assert r.headers["www-authenticate"].startswith("Bearer")
                assert r.json()["error"]["type"] == "unauthorized"
        assert (await g.client.get("/healthz")).status_code == 200
        assert (await g.client.get("/readyz")).status_code != 401
        assert (await g.queue.stats("m")).counters.get("arrived", 0) == 0


async def test_bearer_and_x_api_key_both_work(make_gw) -> None:
    async with make_gw() as g:
        r1 = await g.client.post("/v1/models/m/jobs", json=JOB, headers=bearer(ALICE))
        r2 = await g.client.post("/v1/models/m/jobs", json=JOB, headers={"X-API-Key": ALICE})
        assert r1.status_code == r2.status_code == 202
        job = await g.client.get(f"/v1/jobs/{r1.json()['id']}", headers={"X-API-Key": ALICE})
        assert job.status_code == 200 and job.json()["status"] == "queued"


async def test_another_keys_job_is_404_like_an_unknown_job(make_gw) -> None:
    async with make_gw() as g:
        job_id = (await g.client.post("/v1/models/m/jobs", json=JOB, headers=bearer(ALICE))).json()[
            "id"
        ]
        unknown = job_id[:-4] + "0000"
        for method, suffix in [("GET", ""), ("GET", "?wait=0.5"), ("DELETE", "")]:
            bob = bearer(BOB)
            theirs = await g.client.request(method, f"/v1/jobs/{job_id}{suffix}", headers=bob)
            none = await g.client.request(method, f"/v1/jobs/{unknown}{suffix}", headers=bob)
            assert theirs.status_code == none.status_code == 404
            assert theirs.json() == {
                "error": {
                    **none.json()["error"],
                    "message": none.json()["error"]["message"].replace(unknown, job_id),
                }
            }
        mine = await g.client.get(f"/v1/jobs/{job_id}", headers=bearer(ALICE))
        assert mine.json()["status"] == "queued"  # bob's DELETE did nothing
        assert await code(g, "DELETE", f"/v1/jobs/{job_id}", ALICE) == 200


async def test_batch_jobs_belong_to_their_submitter(make_gw) -> None:
    async with make_gw() as g:
        r = await g.client.post(
            "/v1/models/m/jobs/batch", json={"inputs": ["a", "b"]}, headers=bearer(ALICE)
        )
        for job in r.json()["jobs"]:
            assert await code(g, "GET", f"/v1/jobs/{job['id']}", BOB) == 404
            assert await code(g, "GET", f"/v1/jobs/{job['id']}", ALICE) == 200


async def test_idempotency_keys_never_replay_another_keys_job(make_gw) -> None:
    async with make_gw() as g:
        h = {"Idempotency-Key": "order-1"}
        a = await g.client.post("/v1/models/m/jobs", json=JOB, headers={**bearer(ALICE), **h})
        b = await g.client.post("/v1/models/m/jobs", json=JOB, headers={**bearer(BOB), **h})
        again = await g.client.post("/v1/models/m/jobs", json=JOB, headers={**bearer(BOB), **h})
        assert a.json()["id"] != b.json()["id"]
        assert "idempotent-replayed" not in b.headers
        assert again.json()["id"] == b.json()["id"] and again.headers["idempotent-replayed"]


async def test_predict_returns_the_callers_own_result(make_gw) -> None:
    async with make_gw() as g:
        import asyncio

        async def worker() -> None:
            for _ in range(100):
                batch = await g.queue.claim("m", "w")
                if batch.jobs:
                    await g.queue.complete("m", [Outcome.ok(j.id, "done") for j in batch.jobs], "w")
                    return
                await asyncio.sleep(0.02)

        task = asyncio.create_task(worker())
        r = await g.client.post("/v1/models/m/predict?timeout=5", json=JOB, headers=bearer(ALICE))
        await task
        assert r.status_code == 200 and r.json()["result"] == "done"
        assert (await g.client.get(r.headers["location"], headers=bearer(BOB))).status_code == 404


async def test_rate_limit_per_key_is_429_with_a_computed_retry_after(make_gw) -> None:
    keys: list[dict[str, Any]] = [
        {"name": "alice", "hash": hash_key(ALICE), "rate_limit_per_s": 0.2, "burst": 2},
        {"name": "bob", "hash": hash_key(BOB)},
    ]
    async with make_gw(keyed_config(keys)) as g:
        codes = [
            (await g.client.post("/v1/models/m/jobs", json=JOB, headers=bearer(ALICE)))
            for _ in range(3)
        ]
        assert [c.status_code for c in codes] == [202, 202, 429]
        assert codes[2].json()["error"]["type"] == "rate_limited"
        assert 4 <= int(codes[2].headers["retry-after"]) <= 5  # one token at 0.2/s
        assert (await submit(g, BOB)).status_code == 202


async def test_cap_on_unfinished_jobs_is_429_until_one_ends(make_gw) -> None:
    keys = [{"name": "alice", "hash": hash_key(ALICE), "max_queued_jobs": 2}]
    async with make_gw(keyed_config(keys)) as g:
        for _ in range(2):
            assert (await submit(g, ALICE)).status_code == 202
        full = await g.client.post("/v1/models/m/jobs", json=JOB, headers=bearer(ALICE))
        assert full.status_code == 429 and int(full.headers["retry-after"]) >= 1
        assert full.json()["error"]["type"] == "queue_full"
        batch = await g.queue.claim("m", "w", max_batch=1)
        await g.queue.complete("m", [Outcome.ok(batch.jobs[0].id, 1)], "w")
        assert (await submit(g, ALICE)).status_code == 202


@pytest.mark.parametrize(
    "path", ["/metrics", "/dashboard/api/state", "/dashboard/anything", "/v1/admin/anything"]
)
async def test_admin_routes_need_an_admin_key(make_gw, path: str) -> None:
    async with make_gw() as g:
        assert (await g.client.get(path)).status_code == 401
        forbidden = await g.client.get(path, headers=bearer(ALICE))
        assert forbidden.status_code == 403 and forbidden.json()["error"]["type"] == "forbidden"
        assert (await g.client.get(path, headers=bearer(ROOT))).status_code not in (401, 403)
    if path == "/metrics":
        async with make_gw() as g:
            r = await g.client.get(path, headers=bearer(ROOT))
            assert r.status_code == 200 and "sluice_" in r.text


async def test_dashboard_page_and_assets_load_without_a_key_but_hold_no_data(make_gw) -> None:
    # The page must load to ask for the admin key; its data needs the key.
    async with make_gw() as g:
        page = await g.client.get("/dashboard")
        assert page.status_code == 200 and "Admin key needed" in page.text
        assert (await g.client.get("/dashboard/static/dashboard.js")).status_code == 200
        assert (await g.client.get("/dashboard/api/state")).status_code == 401
        alice = await g.client.get("/dashboard/api/state", headers=bearer(ALICE))
        assert alice.status_code == 403
        data = await g.client.get("/dashboard/api/state", headers=bearer(ROOT))
        assert data.status_code == 200 and [m["name"] for m in data.json()["models"]] == ["m"]
        # A public asset path never reaches the data (dot segments, encoded or not).
        for sneaky in ("/dashboard/static/%2e%2e/api/state", "/dashboard/static/..%2fapi/state"):
            assert (await g.client.get(sneaky)).status_code == 404, sneaky


async def test_admin_listener_split(make_gw) -> None:
    async with make_gw(wrap=lambda app: Listener(app, admin=False)) as api:
        assert (await api.client.get("/metrics", headers=bearer(ROOT))).status_code == 404
        assert (await api.client.get("/dashboard/x", headers=bearer(ROOT))).status_code == 404
        ok = await api.client.post("/v1/models/m/jobs", json=JOB, headers=bearer(ALICE))
        assert ok.status_code == 202
    async with make_gw(wrap=lambda app: Listener(app, admin=True)) as admin:
        assert (await admin.client.get("/metrics", headers=bearer(ROOT))).status_code == 200
        assert (await admin.client.get("/metrics", headers=bearer(ALICE))).status_code == 403
        assert (await admin.client.get("/v1/models", headers=bearer(ROOT))).status_code == 404
        assert (await admin.client.get("/healthz")).status_code == 200


async def test_open_gateway_without_keys_is_unchanged(make_gw) -> None:
    async with make_gw(keyed_config([])) as g:
        r = await g.client.post("/v1/models/m/jobs", json=JOB)
        assert r.status_code == 202
        assert (await g.client.get(f"/v1/jobs/{r.json()['id']}")).status_code == 200
        assert (await g.client.get("/metrics")).status_code == 200


async def test_openapi_schema_declares_the_key_only_when_keys_are_configured(make_gw) -> None:
    async with make_gw() as g:
        schema = (await g.client.get("/openapi.json")).json()
        assert set(schema["components"]["securitySchemes"]) == {"bearer", "apiKey"}
        assert schema["paths"]["/v1/jobs/{job_id}"]["get"]["security"]
        assert "security" not in schema["paths"]["/healthz"]["get"]
    async with make_gw(keyed_config([])) as g:
        schema = (await g.client.get("/openapi.json")).json()
        assert "securitySchemes" not in schema.get("components", {})
