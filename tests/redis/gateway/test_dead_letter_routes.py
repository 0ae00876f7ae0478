"""The dead-letter, queue-purge and retry routes (docs/adr/0153) in-process on a real
Redis: admin only, what each answers, and the audit entry and metrics each leaves."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sluice.jobs import Outcome
from tests.kit.gateway import Harness, HarnessFactory
from tests.kit.security import ALICE, ROOT, bearer, keyed_config
from tests.waits import async_wait_until

DL = "/v1/admin/models/m/dead-letters"
ADMIN = bearer(ROOT)


@pytest.fixture
def kind() -> str:
    return "real"  # the scripts need a real server (the Lua is tested in tests/redis/admin)


async def failed_jobs(h: Harness, n: int, *, worker: str = "w-1") -> list[str]:
    resp = await h.client.post(
        "/v1/models/m/jobs/batch", json={"inputs": [f"job {i}" for i in range(n)]}, headers=ADMIN
    )
    ids = [j["id"] for j in resp.json()["jobs"]]
    claimed = (await h.queue.claim("m", worker)).jobs
    await h.queue.complete("m", [Outcome.fail(j.id, "boom", "it broke") for j in claimed], worker)
    return ids


async def test_only_an_admin_key_acts(make_gateway: HarnessFactory) -> None:
    async with make_gateway(keyed_config()) as h:
        (job,) = await failed_jobs(h, 1)
        user = bearer(ALICE)
        assert (await h.client.get(DL, headers=user)).status_code == 403
        assert (await h.client.post(f"{DL}/redrive", json={}, headers=user)).status_code == 403
        # Outside the admin prefix, the route checks the key itself.
        resp = await h.client.post(f"/v1/jobs/{job}/retry", headers=user)
        assert resp.status_code == 403 and resp.json()["error"]["type"] == "forbidden"
        assert (await h.client.get(f"/v1/jobs/{job}", headers=ADMIN)).json()["status"] == "failed"


async def test_list_redrive_retry_and_purge_leave_an_audit_trail(
    make_gateway: HarnessFactory,
) -> None:
    async with make_gateway(keyed_config()) as h:
        ids = await failed_jobs(h, 3, worker="w-9")
        page = (await h.client.get(DL, params={"limit": 2}, headers=ADMIN)).json()
        assert page["total"] == 3 and len(page["items"]) == 2 and page["next_cursor"]
        item = page["items"][0]
        assert item["error"] == {"type": "boom", "message": "it broke"}
        assert (item["attempts"], item["last_worker"]) == (1, "w-9")
        one = await h.client.get(f"{DL}/{ids[0]}", headers=ADMIN)
        assert one.status_code == 200 and one.json()["id"] == ids[0]

        both = {"ids": [ids[0]], "filter": {}}
        assert (await h.client.post(f"{DL}/redrive", json=both, headers=ADMIN)).status_code == 422
        resp = await h.client.post(
            f"{DL}/redrive", json={"filter": {"error_type": "boom"}}, headers=ADMIN
        )
        done = resp.json()
        assert (done["action"], done["count"], set(done["ids"])) == (
            "dead_letters.redrive",
            3,
            set(ids),
        )
        view = (await h.client.get(f"/v1/jobs/{ids[0]}", headers=ADMIN)).json()
        assert (view["status"], view["attempts"]) == ("queued", 0)
        # Not failed now: a retry is a conflict; an unknown job is not found.
        assert (await h.client.post(f"/v1/jobs/{ids[0]}/retry", headers=ADMIN)).status_code == 409
        assert (await h.client.post("/v1/jobs/m.nothing/retry", headers=ADMIN)).status_code == 404
        # A long-poll on a queued job ends when the purge cancels it.
        poll = asyncio.create_task(
            h.client.get(f"/v1/jobs/{ids[1]}", params={"wait": 20}, headers=ADMIN)
        )
        await async_wait_until(lambda: h.state.waiters.waiting > 0, what="the long-poll waits")
        purge = await h.client.post("/v1/admin/models/m/queue/purge", json={}, headers=ADMIN)
        assert purge.json()["count"] == 3
        assert (await poll).json()["status"] == "cancelled"
        assert (
            await h.client.post("/v1/admin/models/nope/queue/purge", json={}, headers=ADMIN)
        ).status_code == 404

        audit = (await h.client.get("/v1/admin/audit", headers=ADMIN)).json()["entries"]
        got = [(e["actor"], e["action"], e["model"], e["count"]) for e in audit]
        assert got == [
            ("root", "queue.purge", "m", 3),
            ("root", "dead_letters.redrive", "m", 3),
        ]
        assert audit[1]["detail"] == {"filter": {"error_type": "boom"}}
        metrics = (await h.client.get("/metrics", headers=ADMIN)).text
        assert 'sluice_admin_jobs_total{action="dead_letters.redrive",model="m"} 3.0' in metrics
        assert 'sluice_admin_actions_total{action="queue.purge",model="m"} 1.0' in metrics


async def test_retry_one_failed_job_and_purge_dead_letters(make_gateway: HarnessFactory) -> None:
    async with make_gateway(keyed_config()) as h:
        first, second = await failed_jobs(h, 2)
        resp = await h.client.post(f"/v1/jobs/{first}/retry", headers=ADMIN)
        body: dict[str, Any] = resp.json()
        assert resp.status_code == 200 and (body["action"], body["count"]) == ("retry", 1)
        gone = await h.client.post(f"{DL}/purge", json={"ids": [second, first]}, headers=ADMIN)
        assert gone.json()["ids"] == [second]  # the retried one is no dead letter now
        assert (await h.client.get(f"{DL}/{second}", headers=ADMIN)).status_code == 404
        assert (await h.client.get(DL, headers=ADMIN)).json()["total"] == 0
