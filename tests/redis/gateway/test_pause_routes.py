"""POST /v1/admin/models/{model}/pause|resume (ADR 0154): the answer, GET /v1/models,
the refusal of submits, the gauge, the audit trail and the action counters."""

from __future__ import annotations

from tests.kit.gateway import Harness


async def test_pause_refusing_submits_then_resume(gw: Harness) -> None:
    c = gw.client
    resp = await c.post("/v1/admin/models/m/pause", json={"refuse_submits": True})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["model"] == "m" and body["action"] == "pause" and body["count"] == 1
    assert body["paused"] is True and body["refuse_submits"] is True
    models = {m["id"]: m for m in (await c.get("/v1/models")).json()["data"]}
    assert models["m"]["paused"] is True and models["m"]["pause"]["refuse_submits"] is True
    assert models["pinned"]["paused"] is False and models["pinned"]["pause"] is None

    refused = await c.post("/v1/models/m/jobs", json={"input": "a b"})
    assert refused.status_code == 503 and refused.headers.get("retry-after")
    assert refused.json()["error"]["type"] == "model_paused"

    await gw.refresh()
    metrics = (await c.get("/metrics")).text
    assert 'sluice_model_paused{model="m"} 1.0' in metrics
    assert 'sluice_admin_actions_total{action="pause",model="m"} 1.0' in metrics
    assert 'sluice_jobs_rejected_total{model="m",reason="model_paused"} 1.0' in metrics

    again = (await c.post("/v1/admin/models/m/resume")).json()
    assert again["count"] == 1 and again["paused"] is False
    assert (await c.post("/v1/admin/models/m/resume")).json()["count"] == 0
    assert (await c.post("/v1/models/m/jobs", json={"input": "a b"})).status_code == 202
    entries = (await c.get("/v1/admin/audit", params={"model": "m"})).json()["entries"]
    assert [e["action"] for e in entries] == ["resume", "resume", "pause"]
    assert entries[-1]["detail"] == {"refuse_submits": True}


async def test_a_pause_uses_the_config_default_and_refuses_bad_requests(gw: Harness) -> None:
    c = gw.client
    body = (await c.post("/v1/admin/models/m/pause")).json()
    assert body["paused"] is True and body["refuse_submits"] is False  # pause.refuse_submits
    assert (await c.post("/v1/models/m/jobs", json={"input": "a b"})).status_code == 202
    assert (await c.post("/v1/admin/models/nope/pause")).status_code == 404
    bad = await c.post("/v1/admin/models/m/pause", json={"refuse": True})
    assert bad.status_code == 422
