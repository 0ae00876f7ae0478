"""The autoscaler's decision log in Redis: latest decision always, changes only in the log."""

from __future__ import annotations

import json

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from autoscaler.decisions import LOG_LENGTH, DecisionLog, commands, entry
from autoscaler.observation import Observation
from autoscaler.policy import Decision
from sluice import keys


def test_only_changes_are_logged_and_the_log_is_bounded(r: redis.Redis) -> None:
    clock = iter(float(t) for t in range(1000, 2000))
    dlog = DecisionLog(r, wall=lambda: next(clock))
    obs = Observation(current=1, ready=1, queued=7, p99_wait_ms=250.0)
    for _ in range(3):  # the same steady decision three periods running: logged once
        dlog.record("m", Decision(1, 1, "steady", 1.0), obs, period_s=5)
    dlog.record("m", Decision(1, 3, "backlog", 2.6), obs, period_s=5)
    log = [json.loads(x) for x in r.lrange(keys.decisions_key("m"), 0, -1)]
    assert [(e["current"], e["desired"], e["reason"]) for e in log] == [
        (1, 3, "backlog"),
        (1, 1, "steady"),
    ]
    assert log[0]["queued"] == 7 and log[0]["p99_wait_ms"] == 250.0 and log[0]["needed"] == 2.6
    state = r.hgetall(keys.scale_state_key("m"))
    assert state["desired"] == "3" and state["reason"] == "backlog"
    assert state["at_ms"] == "1003000" and float(state["period_s"]) == 5
    assert 0 < r.ttl(keys.scale_state_key("m")) <= 60 and r.ttl(keys.decisions_key("m")) > 0
    for i in range(LOG_LENGTH + 10):
        dlog.record("m", Decision(i, i + 1, "load", 1.0), None, period_s=5)
    assert r.llen(keys.decisions_key("m")) == LOG_LENGTH


def test_missing_observation_records_no_made_up_signals() -> None:
    e = entry(Decision(2, 2, "missing-metrics", 2.0), None, at_ms=5)
    cmds = commands("m", e, period_s=30, changed=False)
    hset = cmds[0]
    fields = dict(zip(hset[2::2], hset[3::2], strict=True))
    assert fields["queued"] == "" and fields["reason"] == "missing-metrics"
    assert cmds[1] == ("EXPIRE", keys.scale_state_key("m"), 300)  # 10 periods
    assert len(cmds) == 2  # unchanged: nothing appended to the log


def test_a_redis_failure_is_swallowed() -> None:
    broken = redis.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    dlog = DecisionLog(broken)
    dlog.record("m", Decision(1, 2, "load", 2.0), None, period_s=5)  # must not raise
    assert dlog.last == {}  # not remembered: the next period tries to log it again


def test_the_control_loop_records_its_decisions(tmp_path, redis_url: str, r: redis.Redis) -> None:
    from autoscaler.backends.base import DryRunBackend
    from autoscaler.loop import Autoscaler
    from autoscaler.observe import Observer
    from autoscaler.reload import PolicySource
    from sluice.config import load_config
    from sluice.jobs import NewJob
    from sluice.queue import QueueClient
    from sluice.queue.client import connect

    path = tmp_path / "sluice.yaml"
    path.write_text(
        "models:\n  m:\n    handler: synthetic\n    autoscaling:\n"
        "      min_replicas: 0\n      period_s: 1\n"
    )
    cfg = load_config(path)
    client = QueueClient(connect(redis_url), dict(cfg.models))
    client.submit("m", [NewJob(input="x", bucket="32", cost=10)])
    loop = Autoscaler(PolicySource(path, cfg), Observer(client, dict(cfg.models)), DryRunBackend())
    d = loop.step(now_s=100.0)["m"]
    assert (d.current, d.desired, d.reason) == (0, 1, "wake")  # queued job at zero replicas
    state = r.hgetall(keys.scale_state_key("m"))
    assert (state["current"], state["desired"], state["reason"]) == ("0", "1", "wake")
    [logged] = [json.loads(x) for x in r.lrange(keys.decisions_key("m"), 0, -1)]
    assert logged["reason"] == "wake" and logged["queued"] == 1


def test_a_redis_outage_is_logged_once_not_every_period(caplog) -> None:  # type: ignore[no-untyped-def]
    broken = redis.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    dlog = DecisionLog(broken)
    with caplog.at_level("WARNING", logger="sluice.autoscaler"):
        for _ in range(3):
            dlog.record("m", Decision(1, 2, "load", 2.0), None, period_s=5)
    assert len([r for r in caplog.records if "m: record" in r.getMessage()]) == 1
