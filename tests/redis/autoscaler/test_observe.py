"""The observer against a real Redis: queue, rates, waits, workers; failures hold."""

from __future__ import annotations

import json
import time

import pytest
import redis

from autoscaler.metrics import AutoscalerMetrics
from autoscaler.observation import Observation
from autoscaler.observe import Observer
from autoscaler.policy import PolicyState, decide
from autoscaler.upkeep import Upkeep
from sluice import keys, registry
from sluice.bulk.ops import BULK_REPORT_MAX_AGE_MS
from sluice.jobs import NewJob
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.conftest import make_config
from tests.factories import worker_info

pytestmark = pytest.mark.redis


class Clock:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


def _jobs(n: int, cost: int, priority: str = "normal", bucket: str = "128") -> list[NewJob]:
    return [NewJob(input={"x": i}, bucket=bucket, cost=cost, priority=priority) for i in range(n)]


def _read(ob: Observer, current: int = 0) -> Observation | None:
    snap = ob.read("m", current)
    return None if snap is None else snap.observation


def _heartbeat(r: redis.Redis, **kw: object) -> None:
    info = worker_info(
        **{
            "buckets": ["32", "128", "512"],
            "started_at": time.time() - 12,
            "ready_at": time.time() - 2,
            **kw,
        }
    )
    pipe = r.pipeline(transaction=False)
    for cmd in registry.heartbeat(info, 10.0):
        pipe.execute_command(*cmd)
    pipe.execute()


def test_counts_costs_priorities_and_oldest_wait(r: redis.Redis) -> None:
    cfg = make_config()
    client = QueueClient(r, dict(cfg.models))
    client.submit("m", _jobs(3, 100) + _jobs(2, 50, "low", "32"))
    # Age the oldest low job by rewriting its enqueue time 4 s into the past.
    low_head = str(r.zrange(keys.queue_key("m", "32"), 0, 0)[0])
    r.hset(keys.job_key("m", low_head), "enq", int(time.time() * 1000) - 4000)
    _heartbeat(r, service_rate=1234.0)
    obs = _read(Observer(client, dict(cfg.models)), current=1)
    assert obs is not None
    assert (obs.queued, obs.queued_cost, obs.queued_non_low) == (5, 400.0, 3)
    assert 3900 <= obs.oldest_wait_ms <= 6000  # a low-priority job, behind normal ones
    assert (obs.ready, obs.starting, obs.service_rate) == (1, 0, 1234.0)
    assert obs.cold_start_s == pytest.approx(10.0, abs=0.5)
    assert obs.arrival_rate_cost is None  # one sample: no rate yet, decide() holds
    assert decide(cfg.models["m"].autoscaling, obs, PolicyState(), 0.0).reason == "missing-metrics"


def test_rates_over_the_windows_and_p99_from_claims(r: redis.Redis) -> None:
    cfg = make_config(autoscaling={"metrics_window_s": 60})
    client = QueueClient(r, dict(cfg.models))
    clock = Clock()
    ob = Observer(client, dict(cfg.models), wall=clock)
    assert _read(ob) is not None
    client.submit("m", _jobs(10, 300))  # 3000 cost units
    clock.t += 30.0
    obs = _read(ob)
    assert obs is not None
    # 3000 units over 30 s; the 15 s window has only this sample's neighbour at 30 s back.
    assert obs.arrival_rate_cost == pytest.approx(100.0)
    # A claim records the waits; they were short, so the p99 bucket is small.
    batch = client.claim("m", "w1")
    assert len(batch.jobs) == 10
    obs = _read(ob)
    assert obs is not None and obs.p99_wait_ms is not None and obs.p99_wait_ms <= 1000
    assert obs.in_flight == 10 and obs.queued == 0 and obs.oldest_wait_ms == 0.0


def test_a_read_reports_lapsed_workers_and_the_upkeep_prunes_them(r: redis.Redis) -> None:
    cfg = make_config()
    client = QueueClient(r, dict(cfg.models))
    _heartbeat(r)  # w1: live
    r.zadd(keys.workers_key("m"), {"x": 0})  # registered, heartbeat long lapsed
    snap = Observer(client, dict(cfg.models)).read("m")
    assert snap is not None
    assert [w.id for w in snap.workers] == ["w1"] and snap.stale_workers == ("x",)
    assert r.zscore(keys.workers_key("m"), "x") is not None  # a read writes nothing
    Upkeep(client, AutoscalerMetrics()).prune("m", snap.stale_workers)
    assert r.zscore(keys.workers_key("m"), "x") is None
    assert r.zscore(keys.workers_key("m"), "w1") is not None  # the live one stays


def test_a_flushed_redis_restarts_the_rate_window(r: redis.Redis) -> None:
    cfg = make_config()
    client = QueueClient(r, dict(cfg.models))
    clock = Clock()
    ob = Observer(client, dict(cfg.models), wall=clock)
    client.submit("m", _jobs(5, 100))
    _read(ob)
    r.flushall()
    clock.t += 40
    obs = _read(ob)
    assert obs is not None and obs.arrival_rate_cost is None  # never a negative rate


def test_unreachable_redis_reads_none_and_decide_holds() -> None:
    cfg = make_config()
    dead = connect("redis://127.0.0.1:1/0", timeout_s=0.2)
    obs = _read(Observer(QueueClient(dead, dict(cfg.models)), dict(cfg.models)), 3)
    assert obs is None
    d = decide(cfg.models["m"].autoscaling, obs, PolicyState(), 0.0)
    assert d.reason == "missing-metrics" and d.direction == "none"


def _report(queued: int, queued_cost: int, backlog_cost: int, age_ms: int = 0) -> str:
    at_ms = int(time.time() * 1000) - age_ms
    return json.dumps(
        {"queued": queued, "queued_cost": queued_cost, "backlog_cost": backlog_cost, "at_ms": at_ms}
    )


def test_bulk_items_are_counted_apart(r: redis.Redis) -> None:
    cfg = make_config()
    client = QueueClient(r, dict(cfg.models))
    # Interactive: 3 normal (cost 100, bucket 128) + 2 low (50, bucket 32) = 5 jobs, 400.
    # Bulk (rank 3): 2 x 100 in bucket 128 beside the normal ones, 4 x 200 in bucket 512.
    client.submit(
        "m",
        _jobs(3, 100)
        + _jobs(2, 50, "low", "32")
        + _jobs(2, 100, "bulk")
        + _jobs(4, 200, "bulk", "512"),
    )
    # The oldest job of all is a bulk one: bulk waits by design, it is no breach.
    bulk_head = str(r.zrange(keys.queue_key("m", "512"), 0, 0)[0])
    r.hset(keys.job_key("m", bulk_head), "enq", int(time.time() * 1000) - 60_000)
    r.hset(
        keys.bulk_backlog_key("m"),
        mapping={
            "b1": _report(6, 1000, 50_000),  # live: 6 queued (all of them) + 49000 unfed
            "b2": _report(3, 600, 9_000_000, age_ms=BULK_REPORT_MAX_AGE_MS + 1000),  # dead
            "b3": "not json",
            "b4": json.dumps({"queued": 1}),
            "b5": "[1, 2]",
        },
    )
    obs = _read(Observer(client, dict(cfg.models)), current=1)
    assert obs is not None
    assert (obs.queued, obs.queued_cost, obs.queued_non_low) == (5, 400.0, 3)
    # 512: all bulk, 800; 128: 2 of 5 jobs of cost 500 are bulk, 200.
    assert (obs.bulk_queued, obs.bulk_queued_cost) == (6, 1000.0)
    assert obs.bulk_backlog_cost == 50_000.0  # b1 only; b1 covers all the queued bulk cost
    assert obs.oldest_wait_ms < 1000  # ranks 0..2 only


def test_queued_bulk_without_a_live_report_is_backlog(r: redis.Redis) -> None:
    cfg = make_config(autoscaling={"min_replicas": 0})
    client = QueueClient(r, dict(cfg.models))
    client.submit("m", _jobs(4, 200, "bulk", "512"))
    # Its coordinator died a while ago: its report is stale, its 4 items still queued.
    r.hset(
        keys.bulk_backlog_key("m"),
        "b1",
        _report(4, 800, 100_000, age_ms=BULK_REPORT_MAX_AGE_MS + 1000),
    )
    obs = _read(Observer(client, dict(cfg.models)), current=0)
    assert obs is not None
    assert (obs.queued, obs.queued_cost, obs.bulk_queued) == (0, 0.0, 4)
    assert obs.bulk_backlog_cost == 800.0
    # A model at zero wakes for them, even before any rate is known.
    d = decide(cfg.models["m"].autoscaling, obs, PolicyState(), 0.0)
    assert (d.desired, d.reason) == (1, "bulk-wake")


def test_arrival_rate_excludes_bulk_arrivals(r: redis.Redis) -> None:
    cfg = make_config(autoscaling={"metrics_window_s": 60})
    client = QueueClient(r, dict(cfg.models))
    clock = Clock()
    ob = Observer(client, dict(cfg.models), wall=clock)
    assert _read(ob) is not None
    # 3000 interactive units and 10000 bulk units arrive over 30 s.
    client.submit("m", _jobs(10, 300) + _jobs(20, 500, "bulk", "512"))
    assert client.stats("m").counters["bulk_arrived_cost"] == 10_000
    clock.t += 30.0
    obs = _read(ob)
    assert obs is not None
    assert obs.arrival_rate_cost == pytest.approx(100.0)  # 3000 / 30, not 13000 / 30
    assert (obs.queued, obs.queued_cost, obs.bulk_queued, obs.bulk_queued_cost) == (
        10,
        3000.0,
        20,
        10_000.0,
    )


def test_burst_rate_trend_parked_workers_and_the_start_path(r: redis.Redis) -> None:
    # predict.window_s 40: reads at 0, 10, 20, 30, 40 s of a rising load (100, 200,
    # 300, 400 cost units per 10 s). Over the window: the older half's rate 15/s, the
    # newer half's 35/s, over 20 s: a slope of 1 unit/s per s. The 5 s rate is the
    # last 10 s step's (the oldest sample inside 5 s is the read itself: none).
    cfg = make_config(autoscaling={"metrics_window_s": 60, "predict": {"window_s": 40}})
    client = QueueClient(r, dict(cfg.models))
    clock = Clock()
    ob = Observer(client, dict(cfg.models), wall=clock)
    assert _read(ob) is not None
    for step in (1, 2, 3, 4):
        client.submit("m", _jobs(step, 100))
        clock.t += 10.0
        obs = _read(ob)
        assert obs is not None
    assert obs.arrival_rate_slope == pytest.approx(1.0)
    assert obs.arrival_rate_cost_burst is None  # no sample within the last 5 s but this one
    _heartbeat(r, state="standby", parked=True)
    _heartbeat(r, id="w2", state="starting", parked=True)  # a pool refill still loading
    _heartbeat(
        r,
        id="w3",
        extra={"promote_s": 0.004, "start_path": {"imports": 1.5, "warmup": 0.2}},
    )
    obs = _read(ob)
    assert obs is not None
    # The loading refill is no capacity on its way; the parked one is counted apart.
    assert (obs.ready, obs.starting, obs.parked) == (1, 0, 1)
    assert obs.promote_s == pytest.approx(0.004)
    assert dict(obs.start_path) == {"imports": 1.5, "warmup": 0.2}
