"""A torch handler's micro-batches (ADR 0164, issue 31 section 3) on a real Redis:
jobs cancelled while their batch runs stop its compute between two forward passes,
and no result of theirs is stored."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
import torch

from sluice import keys
from sluice.queue import QueueClient
from sluice.records import JobField as J
from tests.kit.workers import MODEL, Running, submit, worker_config
from tests.kit.yield_handlers import GatedTiny
from tests.waits import wait_until

pytestmark = pytest.mark.redis
torch.set_num_threads(1)


def test_a_cancel_stops_a_torch_batch_between_micro_batches(
    r: redis.Redis, start_worker: Callable[..., Running]
) -> None:
    GatedTiny.reset()
    cfg = worker_config("tests.kit.yield_handlers:GatedTiny", params={"micro_batch": 2})
    qc = QueueClient(r, dict(cfg.models))
    ids = submit(qc, cfg, [f"short text {i}" for i in range(6)])  # one batch of 6
    run = start_worker(cfg)
    assert GatedTiny.entered.wait(10)  # the first pass (2 rows) is running
    for jid in ids:
        qc.cancel(jid)
    # The worker's next lease renewal brings the news (heartbeat 0.2 s).
    wait_until(lambda: run.worker.status.all_stopped(ids), what="the cancel seen")
    GatedTiny.gate.set()
    assert GatedTiny.done.wait(10)
    assert GatedTiny.rows == 2  # the first pass only: stopped before the second
    for jid in ids:
        status, result = r.hmget(keys.job_key(MODEL, jid), J.STATUS, J.RESULT)
        assert status == "cancelled" and result is None
