"""The loop's upkeep: it reclaims expired leases itself, so jobs stranded at zero
workers run again, and prunes the lapsed workers its read found."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
import yaml

from autoscaler.backends.base import DryRunBackend
from autoscaler.loop import Autoscaler
from autoscaler.metrics import AutoscalerMetrics
from autoscaler.observe import Observer
from autoscaler.reload import PolicySource
from sluice import keys, registry
from sluice.config import SluiceConfig, load_config
from sluice.errors import RedisUnavailable
from sluice.jobs import NewJob
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.registry import WorkerInfo
from tests.factories import worker_info

pytestmark = pytest.mark.redis


class Recording(DryRunBackend):
    """Zero replicas (nothing heartbeats); remembers every scale request."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[int] = []
        self.seen: list[list[str]] = []  # worker ids passed to observe(), per period

    def observe(self, model: str, workers: list[WorkerInfo]) -> None:
        super().observe(model, workers)
        self.seen.append([w.id for w in workers])

    def scale(self, model: str, desired: int, workers: list[WorkerInfo]) -> None:
        self.requests.append(desired)


def _config(tmp_path: Path, lease_s: float) -> tuple[Path, SluiceConfig]:
    path = tmp_path / "sluice.yaml"
    doc = {
        "models": {
            "m": {
                "handler": "synthetic",
                "batching": {"lease_s": lease_s, "max_attempts": 3},
                "retry": {"backoff_ms": 0},  # requeued at once: the wake is under test
                "autoscaling": {
                    "min_replicas": 0,
                    "max_replicas": 4,
                    "idle_s": 60,
                    "period_s": 1,
                    "service_rate_cost_per_s": 1000,
                },
            }
        }
    }
    path.write_text(yaml.safe_dump(doc))
    return path, load_config(path)


def _stranded_job(client: QueueClient) -> str:
    """A job claimed by a worker that then died (it never heartbeats, completes or renews)."""
    jid = client.submit("m", [NewJob(input="x", bucket="32", cost=10)])[0].id
    assert [j.id for j in client.claim("m", "w-crashed").jobs] == [jid]
    return jid


def _loop(path: Path, cfg: SluiceConfig, client: QueueClient, backend: Recording) -> Autoscaler:
    observer = Observer(client, dict(cfg.models))
    return Autoscaler(PolicySource(path, cfg), observer, backend, AutoscalerMetrics())


def test_loop_requeues_an_expired_lease_at_zero_workers_and_wakes(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    path, cfg = _config(tmp_path, lease_s=0.2)
    client = QueueClient(connect(redis_url), dict(cfg.models))
    jid = _stranded_job(client)
    time.sleep(0.4)  # the 0.2 s lease lapses (Redis server clock)
    assert client.get(jid).status == "running"  # nobody reclaims it: no worker claims
    backend = Recording()
    loop = _loop(path, cfg, client, backend)
    d = loop.step(now_s=100.0)["m"]
    # Reclaimed before the read, so the job is queued again: a model at zero wakes for it.
    assert (d.current, d.desired, d.reason) == (0, 1, "wake")
    assert backend.requests == [1]
    job = client.get(jid)
    assert job.status == "queued" and job.attempts == 1
    stats = client.stats("m")
    assert (stats.queued, stats.in_flight) == (1, 0)
    get = loop.metrics.registry.get_sample_value
    assert get("sluice_autoscaler_reclaimed_leases_total", {"model": "m"}) == 1.0
    # A worker started now claims it in its original place.
    assert [j.id for j in client.claim("m", "w-new").jobs] == [jid]


def test_loop_wakes_for_jobs_held_by_nobody_before_their_lease_expires(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    path, cfg = _config(tmp_path, lease_s=30.0)
    client = QueueClient(connect(redis_url), dict(cfg.models))
    jid = _stranded_job(client)
    backend = Recording()
    loop = _loop(path, cfg, client, backend)
    d = loop.step(now_s=100.0)["m"]
    # The lease has 30 s to go: nothing to reclaim yet, nothing queued, one job in flight,
    # no registered worker holds it.
    assert client.get(jid).status == "running"
    assert (d.current, d.desired, d.reason) == (0, 1, "orphaned-jobs")
    assert backend.requests == [1]
    assert loop.metrics.registry.get_sample_value(
        "sluice_autoscaler_reclaimed_leases_total", {"model": "m"}
    ) in (None, 0.0)


def test_a_failed_reclaim_is_counted_and_the_period_still_decides(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    path, cfg = _config(tmp_path, lease_s=30.0)

    class NoReclaim(QueueClient):
        def reclaim(self, model: str) -> int:
            raise RedisUnavailable("Redis unavailable: injected")

    client = NoReclaim(connect(redis_url), dict(cfg.models))
    client.submit("m", [NewJob(input="x", bucket="32", cost=10)])
    backend = Recording()
    loop = _loop(path, cfg, client, backend)
    d = loop.step(now_s=100.0)["m"]
    assert (d.current, d.desired, d.reason) == (0, 1, "wake")
    assert (
        loop.metrics.registry.get_sample_value(
            "sluice_autoscaler_reclaim_errors_total", {"model": "m"}
        )
        == 1.0
    )
    assert loop.step(now_s=101.0)["m"].desired == 1  # and the next period runs too


def test_a_period_prunes_the_lapsed_workers_its_read_found(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    path, cfg = _config(tmp_path, lease_s=30.0)

    class Flaky(QueueClient):
        down = False

        def stats(self, model: str):  # type: ignore[no-untyped-def]
            if self.down:
                raise RedisUnavailable("Redis unavailable: injected")
            return super().stats(model)

    client = Flaky(connect(redis_url), dict(cfg.models))
    live = worker_info(started_at=time.time(), ready_at=time.time())
    pipe = r.pipeline(transaction=False)
    for cmd in registry.heartbeat(live, 30.0):
        pipe.execute_command(*cmd)
    pipe.execute()
    r.zadd(keys.workers_key("m"), {"w-gone": 0})  # registered, heartbeat long lapsed
    backend = Recording()
    loop = _loop(path, cfg, client, backend)
    loop.step(now_s=100.0)
    assert r.zscore(keys.workers_key("m"), "w-gone") is None  # pruned by the upkeep step
    assert r.zscore(keys.workers_key("m"), "w1") is not None
    assert backend.seen == [["w1"]]
    # A failed read holds, and the backend keeps seeing the workers it last saw.
    client.down = True
    d = loop.step(now_s=200.0)["m"]
    assert (d.current, d.desired, d.reason) == (1, 1, "missing-metrics")
    assert backend.seen == [["w1"], ["w1"]]
