"""Webhooks at the gateway: what a submit may name (422 with the reason), what GET
shows, and the admin routes (fakeredis and a real Redis; the SSE streams, which
need a real server, are in tests/redis/webhooks/test_events.py)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gateway.schemas import JobView
from sluice.apikeys import hash_key
from sluice.config import SluiceConfig
from sluice.jobs import Outcome
from tests.factories import sluice_config
from tests.kit.gateway import Harness, HarnessFactory
from tests.kit.webhooks import SECRET, SECRET_ENV

ALICE, ROOT = "sk_alice-0123456789abcdef", "sk_root-0123456789abcdef"
RECEIVER = "http://127.0.0.1:9/hook"  # never called here: no notifier runs


def config(
    webhooks: dict[str, Any] | None = None, keys: list[dict[str, Any]] | None = None
) -> SluiceConfig:
    wh = {"secret_env": SECRET_ENV, "allow_networks": ["127.0.0.1/32"], "allow_http": True}
    sections: dict[str, Any] = {"webhooks": wh | (webhooks or {})}
    if keys is not None:
        sections["auth"] = {"keys": keys}
    # min_replicas 0: admitted with no worker up
    return sluice_config({"autoscaling": {"min_replicas": 0}}, **sections)


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)


async def submit(c: httpx.AsyncClient, hook: Any, **headers: str) -> httpx.Response:
    body: dict[str, Any] = {"input": "hello there"}
    if hook is not None:
        body["webhook"] = hook
    return await c.post("/v1/models/m/jobs", json=body, headers=headers)


async def queued(h: Harness) -> int:
    return (await h.queue.stats("m")).queued


@pytest.mark.parametrize(
    ("hook", "why"),
    [
        ({"url": "file:///etc/passwd"}, "is not https"),
        ({"url": "https://169.254.169.254/latest/meta-data"}, "link-local"),
        ({"url": "http://127.0.0.2:9/hook"}, "loopback"),
        ({"url": "http://[::1]:9/hook"}, "loopback"),
        ({"url": "http://10.0.0.1/hook"}, "private"),
        ({"url": "http://a..b/hook"}, "does not resolve"),  # the resolver's UnicodeError
        ({"url": "https://\u2603.net/hook"}, "not a URL"),  # httpx cannot encode it
        ({"url": "http://[64:ff9b::a9fe:a9fe]/"}, "link-local"),  # NAT64 of the metadata IP
        ({"url": "https://user:pw@127.0.0.1/hook"}, "credentials"),
        ({"url": RECEIVER, "events": ["succeeded", "sometimes"]}, "events"),
        ({"url": RECEIVER, "events": []}, "events"),
        ({"url": "x" * 3000}, "url"),
        ({"url": RECEIVER, "secret": "mine"}, "secret"),
    ],
)
async def test_a_webhook_the_guard_refuses_is_422_and_queues_nothing(
    make_gateway: HarnessFactory, hook: dict[str, Any], why: str
) -> None:
    async with make_gateway(config()) as h:
        r = await submit(h.client, hook)
        assert r.status_code == 422, r.text
        assert why in r.json()["error"]["message"]
        batch = await h.client.post(
            "/v1/models/m/jobs/batch", json={"inputs": ["a", "b"], "webhook": hook}
        )
        assert batch.status_code == 422
        assert await queued(h) == 0


async def test_plain_http_and_closed_networks_need_the_config(make_gateway: HarnessFactory) -> None:
    async with make_gateway(config({"allow_http": False, "allow_networks": []})) as h:
        r = await submit(h.client, {"url": RECEIVER})
        assert r.status_code == 422 and "https" in r.json()["error"]["message"]
        r = await submit(h.client, {"url": "https://127.0.0.1/hook"})
        assert r.status_code == 422 and "loopback" in r.json()["error"]["message"]
        assert r.json()["error"]["type"] == "webhook_refused"
        # a host name that resolves to loopback (this machine's resolver) is refused too
        r = await submit(h.client, {"url": "https://localhost:9/hook"})
        assert r.status_code == 422 and "localhost resolves to" in r.json()["error"]["message"]
        assert await queued(h) == 0


async def test_without_a_signing_secret_webhooks_are_refused(
    make_gateway: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SECRET_ENV)
    async with make_gateway(config()) as h:
        r = await submit(h.client, {"url": RECEIVER})
        assert r.status_code == 422 and "no signing secret" in r.json()["error"]["message"]
        assert (await submit(h.client, None)).status_code == 202  # the rest is unchanged


async def test_a_job_shows_its_webhook_from_submit_to_delivery(
    make_gateway: HarnessFactory,
) -> None:
    async with make_gateway(config()) as h:
        r = await submit(h.client, {"url": RECEIVER, "events": ["failed", "failed"]})
        assert r.status_code == 202
        job_id = r.json()["id"]
        view = (await h.client.get(f"/v1/jobs/{job_id}")).json()
        JobView.model_validate(view)
        assert view["webhook"] == {"url": RECEIVER, "events": ["failed"], "state": "waiting"}
        batch = await h.queue.claim("m", "w1")
        await h.queue.complete("m", [Outcome.ok(batch.jobs[0].id, [1.0])], "w1")
        view = (await h.client.get(f"/v1/jobs/{job_id}")).json()
        assert view["webhook"]["state"] == "not_sent"  # succeeded; only failed was asked for
        plain = (await submit(h.client, None)).json()["id"]
        assert "webhook" not in (await h.client.get(f"/v1/jobs/{plain}")).json()


async def test_a_failed_job_has_a_pending_delivery_and_admin_can_redeliver_it(
    make_gateway: HarnessFactory,
) -> None:
    async with make_gateway(config()) as h:
        job_id = (await submit(h.client, {"url": RECEIVER})).json()["id"]
        batch = await h.queue.claim("m", "w1")
        await h.queue.complete("m", [Outcome.fail(batch.jobs[0].id, "model_error", "x")], "w1")
        hook = (await h.client.get(f"/v1/jobs/{job_id}")).json()["webhook"]
        assert hook["state"] == "pending" and hook["attempts"] == 0
        one = await h.client.get(f"/v1/admin/webhooks/{job_id}")
        assert one.status_code == 200 and one.json()["webhook_id"] == f"msg_{job_id}"
        assert one.json()["event"] == "failed" and one.json()["log"] == []
        again = await h.client.post(f"/v1/admin/webhooks/{job_id}/redeliver")
        assert again.status_code == 202
        assert again.json() == {"id": job_id, "state": "pending", "previous_state": "pending"}
        dead = await h.client.get("/v1/admin/webhooks", params={"model": "m"})
        assert dead.status_code == 200 and dead.json() == {"model": "m", "dead": []}
        for path in ("/v1/admin/webhooks/m.nothing", "/v1/admin/webhooks/zz.1/redeliver"):
            r = await (h.client.get(path) if "redeliver" not in path else h.client.post(path))
            assert r.status_code == 404, path
        assert (await h.client.get("/v1/admin/webhooks", params={"model": "zz"})).status_code == 404


async def test_an_api_key_brings_its_default_url_and_allow_list(
    make_gateway: HarnessFactory,
) -> None:
    keys = [
        {
            "name": "alice",
            "hash": hash_key(ALICE),
            "webhook_url": RECEIVER,
            "webhook_allow_hosts": ["127.0.0.1"],
        },
        {"name": "root", "hash": hash_key(ROOT), "admin": True},
    ]
    async with make_gateway(config(keys=keys)) as h:
        alice = {"Authorization": f"Bearer {ALICE}"}
        r = await submit(h.client, None, **alice)
        assert r.status_code == 202
        view = (await h.client.get(f"/v1/jobs/{r.json()['id']}", headers=alice)).json()
        assert view["webhook"]["url"] == RECEIVER
        r = await submit(h.client, {"url": "https://api.example.com/hook"}, **alice)
        assert r.status_code == 422 and "allow-list" in r.json()["error"]["message"]
        root = {"Authorization": f"Bearer {ROOT}"}
        assert "webhook" not in (await submit(h.client, None, **root)).json()
        r = await h.client.post(f"/v1/admin/webhooks/{view['id']}/redeliver", headers=alice)
        assert r.status_code == 403


async def test_predict_takes_a_webhook_for_a_job_that_outlasts_the_wait(
    make_gateway: HarnessFactory,
) -> None:
    async with make_gateway(config()) as h:
        r = await h.client.post(
            "/v1/models/m/predict",
            params={"timeout": 0.05},
            json={"input": "slow one", "webhook": {"url": RECEIVER}},
        )
        assert r.status_code == 202 and r.json()["webhook"]["state"] == "waiting"
        bad = await h.client.post(
            "/v1/models/m/predict", json={"input": "x", "webhook": {"url": "file:///x"}}
        )
        assert bad.status_code == 422 and bad.json()["error"]["type"] == "webhook_refused"
