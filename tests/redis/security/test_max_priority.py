"""An API key's max_priority: asking for more is 403, at or below it is accepted."""

from __future__ import annotations

import pytest

from sluice.apikeys import hash_key
from sluice.errors import ConfigError
from sluice.jobs import Owner
from tests.kit.security import ALICE, BOB, bearer, keyed_config

ASYNC = pytest.mark.asyncio(loop_scope="function")


def _config():  # type: ignore[no-untyped-def]
    return keyed_config(
        [
            {"name": "alice", "hash": hash_key(ALICE), "max_priority": "normal"},
            {"name": "bob", "hash": hash_key(BOB)},
        ]
    )


ROUTES = [
    ("/v1/models/m/jobs", {"input": "hi"}),
    ("/v1/models/m/jobs/batch", {"inputs": ["hi", "there"]}),
    ("/v1/models/m/predict?timeout=0.05", {"input": "hi"}),
]


@ASYNC
@pytest.mark.parametrize(("path", "body"), ROUTES)
async def test_a_priority_above_the_keys_max_is_403(make_gw, path: str, body: dict) -> None:
    async with make_gw(_config()) as g:
        r = await g.client.post(path, json={**body, "priority": "high"}, headers=bearer(ALICE))
        assert r.status_code == 403, r.text
        err = r.json()["error"]
        assert err["type"] == "priority_not_allowed"
        assert "'high'" in err["message"] and "max_priority ('normal')" in err["message"]
        assert (await g.queue.stats("m")).counters.get("arrived", 0) == 0  # nothing queued


@ASYNC
@pytest.mark.parametrize(("path", "body"), ROUTES)
async def test_at_or_below_the_max_and_keys_without_one_are_accepted(
    make_gw, path: str, body: dict
) -> None:
    async with make_gw(_config()) as g:
        for key, prio in ((ALICE, "normal"), (ALICE, "low"), (BOB, "high")):
            r = await g.client.post(path, json={**body, "priority": prio}, headers=bearer(key))
            assert r.status_code in (200, 202), (key, prio, r.text)


def test_max_priority_must_name_a_priority() -> None:
    with pytest.raises(ConfigError, match="max_priority 'urgent' is not a priority"):
        keyed_config([{"name": "a", "hash": hash_key(ALICE), "max_priority": "urgent"}])


def test_bulk_is_always_allowed() -> None:
    capped = Owner("a", max_priority="low")
    assert capped.allows("bulk") and capped.allows("low") and not capped.allows("normal")
