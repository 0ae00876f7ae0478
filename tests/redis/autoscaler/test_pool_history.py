"""warm_pool.size: auto keeps its history in Redis (ADR 0156): a restarted autoscaler
sizes the pool from the minutes the last one stored, at once."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
import yaml

from autoscaler.backends.base import DryRunBackend
from autoscaler.loop import Autoscaler
from autoscaler.observation import Observation
from autoscaler.observe import Observer
from autoscaler.policy import Decision, PolicyState
from autoscaler.pool_history import PoolHistory
from autoscaler.reload import PolicySource
from sluice import keys
from sluice.config import load_config
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.records import PoolMinute

NOW = 1_800_000_000.0  # wall clock


def _loop(tmp_path: Path, redis_url: str) -> Autoscaler:
    path = tmp_path / "sluice.yaml"
    pool = {"size": "auto", "history_s": 3600, "history_min_s": 300}
    auto = {"max_replicas": 20, "service_rate_cost_per_s": 1000, "warm_pool": pool}
    path.write_text(
        yaml.safe_dump({"models": {"m": {"handler": "synthetic", "autoscaling": auto}}})
    )
    cfg = load_config(path)
    client = QueueClient(connect(redis_url), dict(cfg.models))
    observer = Observer(client, dict(cfg.models))
    return Autoscaler(PolicySource(path, cfg), observer, DryRunBackend(), wall=lambda: NOW)


@pytest.mark.redis
def test_a_restarted_autoscaler_sizes_the_pool_from_the_stored_history(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    store = PoolHistory(r)
    # A previous autoscaler stored 10 minutes (rises up to 7.2; 4 serving on average:
    # the cost cap, 0.5 x 4 / 0.1 = 20, does not bind) and one past the window.
    for i in range(10):
        store.save(
            "m", PoolMinute(NOW - 60.0 * (10 - i), 7.2 if i == 4 else 1.0, 0.0, 48.0, 12), 3600
        )
    r.zadd(keys.pool_history_key("m"), {"not json": NOW - 30})  # skipped, logged
    r.zadd(
        keys.pool_history_key("m"),
        {PoolMinute(NOW - 7200, 30.0, 0.0, 4.0, 1).to_json(): NOW - 7200},
    )
    assert len(store.load("m", NOW, 3600).minutes) == 10
    loop = _loop(tmp_path, redis_url)
    obs = Observation(current=4, ready=4, arrival_rate_cost=2000.0, arrival_rate_cost_recent=2000.0)
    d = Decision(4, 4, "steady", 4.0, PolicyState(service_rate=1000.0))
    sized = loop._size_pool("m", d, obs)
    # The 0.99 percentile of 10 minutes is their largest, 7.2 -> 8 (the 30 of two hours
    # ago is out of the hour's window); without the stored history it would be the
    # initial size (one per serving replica: 4).
    assert sized.pool is not None and (sized.pool.size, sized.pool.reason) == (8, "history")
    assert loop.pool_sizes["m"] == 8
    # A minute that closes is stored for the next restart.
    later = loop.wall
    loop.wall = lambda: later() + 60.0
    loop._size_pool("m", d, obs)
    stored = store.load("m", NOW + 60.0, 3600).minutes
    assert stored[-1].start_s == NOW - NOW % 60 and stored[-1].periods == 1
