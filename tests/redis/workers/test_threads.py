"""A CPU worker computes on the threads the local backend gave it
(``SLUICE_NUM_THREADS``, sluice/cores.py) unless ``params.num_threads`` says
otherwise, and its heartbeat says how many, before and after its batches."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis
import torch

from sluice.cores import THREADS_ENV
from sluice.queue import QueueClient
from sluice.registry import list_workers_call
from tests.kit.workers import MODEL, Running, submit, worker_config
from tests.waits import wait_until


@pytest.fixture
def restore_threads() -> Iterator[None]:
    before = torch.get_num_threads()  # set_num_threads is for the whole process
    yield
    torch.set_num_threads(before)


def _threads(qc: QueueClient, batches: int = 0) -> list[object]:
    """Each ready worker's reported threads, once its heartbeat counts ``batches``."""
    workers, _ = qc.run(list_workers_call(MODEL))
    ready = [w for w in workers if w.state == "ready"]
    return [w.extra.get("threads") for w in ready if w.batches >= batches]


@pytest.mark.parametrize(
    ("env", "params", "expected"), [("1", {}, 1), ("1", {"num_threads": 2}, 2)]
)
def test_threads_from_the_backend_unless_the_params_say(
    r: redis.Redis,
    start_worker: Callable[..., Running],
    monkeypatch: pytest.MonkeyPatch,
    restore_threads: None,
    env: str,
    params: dict[str, int],
    expected: int,
) -> None:
    monkeypatch.setenv(THREADS_ENV, env)
    cfg = worker_config("tiny", params=params)
    qc = QueueClient(r, dict(cfg.models))  # the fixture's client: closed after the test
    start_worker(cfg)
    wait_until(lambda: _threads(qc) == [expected])
    assert torch.get_num_threads() == expected
    ids = submit(qc, cfg, ["a b c", "d e"])
    wait_until(lambda: all(qc.get(j).status == "succeeded" for j in ids))
    after = wait_until(lambda: _threads(qc, batches=1))  # a heartbeat from after the batch
    assert after == [expected]  # a batch keeps what start set
