"""The worker registry on a real Redis, as the gateway reads and prunes it.

Liveness is on the Redis server's clock: a worker (``Housekeeper``, the real
heartbeat writer) whose own clock is skewed by an hour lists while it
heartbeats and lapses once it stops. The gateway's prune only forgets a worker
that is still lapsed when the prune runs, so a heartbeat that lands between the
read and the prune keeps its worker.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from gateway.snapshots import Snapshots
from sluice import keys, registry
from sluice.queue import QueueClient
from tests.factories import worker_info
from tests.kit.gateway import HarnessFactory, gateway_config
from tests.waits import async_wait_until, wait_until
from workers.housekeeping import Housekeeper
from workers.status import WorkerStatus

SKEWS = pytest.mark.parametrize("skew_s", [-3600.0, 3600.0], ids=["clock-behind", "clock-ahead"])
# The gateway's own refresher runs at start, then not again during a test.
QUIET = {"stats_refresh_s": 60}


@pytest.fixture
def kind() -> str:
    return "real"  # TIME and Lua on a real server (overrides the fake/real pair)


def _worker(r: redis.Redis, ttl_s: float, skew_s: float = 0.0) -> Housekeeper:
    """A worker ``w1`` of model ``m`` whose clock is ``skew_s`` off; ``beat()`` publishes."""
    now = time.time() + skew_s
    info = worker_info(started_at=now, ready_at=now)
    qc = QueueClient(r, dict(gateway_config().models))
    return Housekeeper(
        qc,
        WorkerStatus(info),
        heartbeat_s=ttl_s / 2,
        ttl_s=ttl_s,
        lease_s=30,
        on_command=lambda _: None,
        wall=lambda: time.time() + skew_s,
    )


async def _listed(snaps: Snapshots) -> list[str]:
    return [w.id for w in (await snaps.refresh())["m"].workers]


@SKEWS
async def test_a_worker_with_a_skewed_clock_lists_while_it_heartbeats(
    make_gateway: HarnessFactory, r: redis.Redis, skew_s: float
) -> None:
    async with make_gateway(gateway_config(QUIET)) as h:
        _worker(r, ttl_s=30, skew_s=skew_s).beat()
        assert await _listed(h.state.snapshots) == ["w1"]
        assert (await h.client.get("/v1/models")).json()["data"][0]["workers"]["ready"] == 1


@SKEWS
async def test_a_worker_with_a_skewed_clock_lapses_once_it_stops(
    make_gateway: HarnessFactory, r: redis.Redis, skew_s: float
) -> None:
    async with make_gateway(gateway_config(QUIET)) as h:
        _worker(r, ttl_s=0.2, skew_s=skew_s).beat()  # its last heartbeat

        async def forgotten() -> bool:
            return await _listed(h.state.snapshots) == [] and not r.hlen(keys.workers_info_key("m"))

        await async_wait_until(forgotten, 10, "the stopped worker to lapse and be pruned")


def _server_passed(r: redis.Redis, worker_id: str) -> bool:
    """True once the Redis clock is past the worker's heartbeat expiry."""
    secs, micros = r.time()
    score = r.zscore(keys.workers_key("m"), worker_id)
    return score is not None and secs + micros / 1e6 > score


async def test_a_heartbeat_between_the_read_and_the_prune_keeps_the_worker(
    make_gateway: HarnessFactory, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_gateway(gateway_config(QUIET)) as h:
        snaps = h.state.snapshots
        _worker(r, ttl_s=0.1).beat()
        # lapsed now, as the next read will see it
        wait_until(lambda: _server_passed(r, "w1"), 10, "the heartbeat to lapse")
        prune = snaps._prune
        interleaved: list[bool] = []

        async def heartbeat_then_prune(commands: list[tuple[Any, ...]]) -> None:
            _worker(r, ttl_s=30).beat()  # the worker was only late: it beats again
            interleaved.append(True)
            await prune(commands)

        monkeypatch.setattr(snaps, "_prune", heartbeat_then_prune)
        assert await _listed(snaps) == []  # read: lapsed; then heartbeat; then prune
        assert interleaved == [True]
        assert await _listed(snaps) == ["w1"]  # the late heartbeat kept it
        assert r.hexists(keys.workers_info_key("m"), "w1")


def test_prune_forgets_only_ids_still_lapsed(r: redis.Redis) -> None:
    """The autoscaler prunes through the same commands (``registry.prune``)."""
    qc = QueueClient(r, dict(gateway_config().models))
    _worker(r, ttl_s=0.1).beat()

    def lapsed() -> list[str]:
        stale = qc.run(registry.list_workers_call("m"))[1]
        return stale if "w1" in stale else []

    stale = wait_until(lapsed, 10, "the heartbeat to lapse")
    _worker(r, ttl_s=30).beat()
    never_seen = "w-gone"  # an id with no score at all is forgotten
    r.hset(keys.workers_info_key("m"), never_seen, "{}")
    assert [r.execute_command(*c) for c in registry.prune("m", [*stale, never_seen])] == [1]
    assert [w.id for w in qc.run(registry.list_workers_call("m"))[0]] == ["w1"]
    assert r.hkeys(keys.workers_info_key("m")) == ["w1"]
