"""The load generator's Idempotency-Key share (the soak's idempotency key family)."""

from __future__ import annotations

import itertools

import httpx

from sluicebench.loadgen.driver import Driver, LoadSpec


async def test_a_share_of_jobs_carries_a_unique_idempotency_key() -> None:
    ids = itertools.count(1)
    keys: list[str | None] = []

    def handle(req: httpx.Request) -> httpx.Response:
        if req.method == "POST":
            keys.append(req.headers.get("idempotency-key"))
            return httpx.Response(202, json={"id": f"m.{next(ids)}", "bucket": "32"})
        job_id = req.url.path.rsplit("/", 1)[1]
        return httpx.Response(200, json={"id": job_id, "status": "succeeded", "bucket": "32"})

    spec = LoadSpec(
        url="http://gw",
        model="m",
        concurrency=8,
        jobs=400,
        progress=False,
        idempotency_fraction=0.25,
        engine="httpx",
    )
    out = await Driver(spec, transport=httpx.MockTransport(handle)).run()
    sent = [k for k in keys if k is not None]
    assert out["succeeded"] == 400 and 60 <= len(sent) <= 140  # 100 expected
    assert len(set(sent)) == len(sent)  # never a replay: each is a new job
    assert out["spec"]["idempotency_fraction"] == 0.25
