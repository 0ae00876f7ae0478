"""The observer reads a generative model's slots, TTFT and tokens/s from a real Redis
(ADR 0149): the TTFT histogram under keys.ttft_hist_prefix in the queue-wait
histogram's layout, the heartbeats' slot fields; an embedding model reads none."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from autoscaler.observe import Observer
from sluice import keys, registry, waits
from sluice.jobs import NewJob
from sluice.queue import QueueClient
from sluice.records import WAIT_COUNT_FIELD, WAIT_LABELS, Stat
from tests.conftest import make_config
from tests.factories import worker_info

pytestmark = pytest.mark.redis


def _heartbeat(r: redis.Redis, slots: int, busy: int, tokens_per_s: float, **kw: Any) -> None:
    """A generative worker's heartbeat (registry.WorkerInfo's slot fields)."""
    info = worker_info(
        buckets=["32", "128", "512"],
        started_at=time.time() - 12,
        ready_at=time.time() - 2,
        slots=slots,
        slots_busy=busy,
        tokens_per_s=tokens_per_s,
        **kw,
    )
    pipe = r.pipeline(transaction=False)
    for cmd in registry.heartbeat(info, 10.0):
        pipe.execute_command(*cmd)
    pipe.execute()


def _ttft(r: redis.Redis, model: str, window_start_s: int, by_label: dict[str, int]) -> None:
    key = f"{keys.ttft_hist_prefix(model)}{window_start_s}"
    for label, n in {**by_label, WAIT_COUNT_FIELD: sum(by_label.values())}.items():
        r.hset(key, label, n)


def test_slots_ttft_and_tokens_per_s_of_a_generative_model(r: redis.Redis) -> None:
    cfg = make_config(generate={"slots": 8}, autoscaling={"metrics_window_s": 60})
    client = QueueClient(r, dict(cfg.models))
    client.submit("m", [NewJob(input={"x": i}, bucket="128", cost=100) for i in range(5)])
    now = time.time()
    w = waits.window_start(now)
    _ttft(r, "m", w, {WAIT_LABELS[2]: 90})  # 90 first tokens within 25 ms
    _ttft(r, "m", w - 30, {WAIT_LABELS[-1]: 10})  # 10 over every bound, 30 s ago
    _ttft(r, "m", w - 600, {WAIT_LABELS[-1]: 1000})  # outside the metrics window
    _heartbeat(r, 16, 12, 800.0, id="a")
    _heartbeat(r, 16, 16, 1200.0, id="b")
    snap = Observer(client, dict(cfg.models), wall=lambda: now).read("m", current=2)
    assert snap is not None
    g = snap.observation.generate
    assert g is not None
    assert (g.slots, g.slots_busy, g.slots_total, g.tokens_per_s) == (16, 28, 32, 1000.0)
    assert g.ttft_p50_ms == 25 and g.ttft_p99_ms == waits.INF_WAIT_MS
    assert snap.observation.queued == 5  # the rest of the read is as before
    assert g.expected_output_tokens == 64  # the configured prior: nothing finished yet


def test_the_expected_output_is_learned_from_finished_jobs(r: redis.Redis) -> None:
    cfg = make_config(generate={"slots": 8, "expected_output_tokens": 64})
    client = QueueClient(r, dict(cfg.models))
    # What the step script counts as jobs end: 10 finished, 1,200 output tokens.
    r.hset(keys.stats_key("m"), mapping={Stat.GEN_FINISHED: 10, Stat.GEN_OUTPUT_TOKENS: 1200})
    snap = Observer(client, dict(cfg.models)).read("m", current=1)
    assert snap is not None and snap.observation.generate is not None
    assert snap.observation.generate.expected_output_tokens == 120.0


def test_an_embedding_model_reads_no_generative_signals(r: redis.Redis) -> None:
    cfg = make_config()
    client = QueueClient(r, dict(cfg.models))
    _ttft(r, "m", waits.window_start(time.time()), {WAIT_LABELS[0]: 5})
    _heartbeat(r, 16, 12, 800.0)
    snap = Observer(client, dict(cfg.models)).read("m", current=1)
    assert snap is not None and snap.observation.generate is None
    assert snap.observation.ready == 1
