"""API keys: a batch over a key's job cap, and one key listed under two names
(each test fails without its fix)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.apikeys import hash_key, load_keyring, new_key
from sluice.config import parse_config
from sluice.errors import ConfigError
from tests.kit.security import ALICE, bearer, keyed_config


@pytest.mark.asyncio(loop_scope="function")
async def test_a_batch_larger_than_the_keys_cap_is_422_not_a_429_that_never_clears(
    make_gw,
) -> None:
    # Cap 2: a batch of 3 can never fit, however long the client waits. A 429 with
    # Retry-After told clients (sluice.client retries 429s) to come back forever.
    keys = [{"name": "alice", "hash": hash_key(ALICE), "max_queued_jobs": 2}]
    async with make_gw(keyed_config(keys)) as g:
        r = await g.client.post(
            "/v1/models/m/jobs/batch", json={"inputs": ["a", "b", "c"]}, headers=bearer(ALICE)
        )
        assert r.status_code == 422, r.text
        assert "retry-after" not in r.headers
        assert "3" in r.json()["error"]["message"] and "2" in r.json()["error"]["message"]
        # A batch that fits the cap is still accepted, and counted against it.
        ok = await g.client.post(
            "/v1/models/m/jobs/batch", json={"inputs": ["a", "b"]}, headers=bearer(ALICE)
        )
        assert ok.status_code == 202
        full = await g.client.post("/v1/models/m/jobs", json={"input": "x"}, headers=bearer(ALICE))
        assert full.status_code == 429 and full.json()["error"]["type"] == "queue_full"
        assert (await g.queue.stats("m")).queued == 2


def test_one_key_under_two_names_is_refused_at_load(tmp_path: Path) -> None:
    # The same key listed twice (a copy left in the config after moving it to the
    # secret file under a new name, say) made its identity depend on list order:
    # the last entry won, with that entry's admin flag, limits and jobs.
    key = new_key()
    secret = tmp_path / "keys.yaml"
    secret.write_text(f'- {{name: ops, hash: "{hash_key(key)}", admin: true}}\n')
    model = {"handler": "synthetic", "autoscaling": {"min_replicas": 0}}
    cfg = parse_config(
        {
            "models": {"m": model},
            "auth": {"keys": [{"name": "alice", "hash": hash_key(key)}], "keys_file": str(secret)},
        }
    )
    with pytest.raises(ConfigError) as err:
        load_keyring(cfg.auth, environ={})
    message = str(err.value)
    assert "alice" in message and "ops" in message
    assert hash_key(key).removeprefix("sha256:") not in message and key not in message
