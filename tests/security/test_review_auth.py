"""Review fixes for the API-key layer (each test fails without its fix)."""

from __future__ import annotations

import pytest

from sluice.apikeys import hash_key
from tests.security.conftest import ALICE, bearer, keyed_config

pytestmark = pytest.mark.asyncio(loop_scope="function")


async def test_a_batch_larger_than_the_keys_cap_is_422_not_a_429_that_never_clears(
    make_gw,
) -> None:
    # Cap 2: a batch of 3 can never fit, however long the client waits. A 429 with
    # Retry-After told clients (sluice.client retries 429s) to come back forever.
    keys = [{"name": "alice", "hash": hash_key(ALICE), "max_queued_jobs": 2}]
    async with make_gw(keyed_config(keys)) as g:
        r = await g.client.post("/v1/models/m/jobs/batch", json={"inputs": ["a", "b", "c"]},
                                headers=bearer(ALICE))  # fmt: skip
        assert r.status_code == 422, r.text
        assert "retry-after" not in r.headers
        assert "3" in r.json()["error"]["message"] and "2" in r.json()["error"]["message"]
        # A batch that fits the cap is still accepted, and counted against it.
        ok = await g.client.post("/v1/models/m/jobs/batch", json={"inputs": ["a", "b"]},
                                 headers=bearer(ALICE))  # fmt: skip
        assert ok.status_code == 202
        full = await g.client.post("/v1/models/m/jobs", json={"input": "x"}, headers=bearer(ALICE))
        assert full.status_code == 429 and full.json()["error"]["type"] == "queue_full"
        assert (await g.queue.stats("m")).queued == 2
