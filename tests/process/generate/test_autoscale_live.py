"""The autoscaler's read of a real generative worker (ADR 0149): a ``sluice worker``
on the tiny GPT heartbeats its slots, busy slots and tokens/s, the step script
fills the TTFT histogram, and the finished jobs teach the expected output: the
Observer sees them all, and decide() records them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from autoscaler.decisions import entry
from autoscaler.observation import GenerateSignals
from autoscaler.observe import Observer
from autoscaler.policy import PolicyState, decide
from sluice.generate.admission import new_job
from sluice.jobs import JobStatus
from sluice.queue import QueueClient
from tests.waits import wait_until

pytestmark = [pytest.mark.system]
MODEL = "tiny-gpt"
READY_S = 120.0  # a cold worker imports torch and transformers on a loaded machine


def test_the_observer_reads_a_live_generative_worker(
    r: redis.Redis, workers: Callable[[], Any], tiny_config: Callable[..., Any]
) -> None:
    w = workers()
    path, cfg = w.config(tiny_config(slots=4))
    qc = QueueClient(r, dict(cfg.models))
    jobs = [new_job(cfg.model(MODEL), [5 + i, 17, 29], max_tokens=40) for i in range(6)]
    ids = [s.id for s in qc.submit(MODEL, jobs)]
    w.spawn("w1", path)
    ob = Observer(qc, dict(cfg.models))
    seen: list[GenerateSignals] = []

    def read_until_done() -> bool:
        snap = ob.read(MODEL, current=1)
        if snap is not None and snap.observation.generate is not None:
            seen.append(snap.observation.generate)
        return all(qc.get(j).status == JobStatus.SUCCEEDED for j in ids)

    wait_until(read_until_done, READY_S, "the six jobs generated", every_s=0.1)
    assert any(g.slots == 4 and g.slots_total == 4 for g in seen)  # from the heartbeat
    assert max(g.slots_busy for g in seen) >= 2  # sequences held slots together
    wait_until(lambda: ob.read(MODEL, current=1) is not None, 10, "a read")
    snap = ob.read(MODEL, current=1)
    assert snap is not None and snap.observation.generate is not None
    g = snap.observation.generate
    assert g.ttft_p99_ms is not None and g.ttft_p50_ms is not None  # the step script's
    outputs = [len(qc.get(j).result["token_ids"]) for j in ids]
    assert g.expected_output_tokens == pytest.approx(sum(outputs) / len(outputs))
    assert any((x.tokens_per_s or 0) > 0 for x in seen)  # heartbeat tokens/s
    d = decide(cfg.model(MODEL).autoscaling, snap.observation, PolicyState(), 0.0)
    assert entry(d, snap.observation, 1).ttft_p99_ms == g.ttft_p99_ms
