"""The local backend's warm pool on real ``sluice worker --parked`` processes
(synthetic handler) and a real Redis: the pool is filled, a scale-up promotes a
parked worker before it starts one and refills behind it, a killed parked worker
is replaced, a trimmed pool drains its parked workers (exit 0), and the observer
counts parked workers apart from capacity on its way (docs/adr/0128)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from autoscaler.backends.local import LocalBackend
from autoscaler.observe import Observer
from autoscaler.service import redis_control
from sluice import registry
from sluice.config import SluiceConfig, WarmPoolConfig, load_config
from sluice.jobs import JobStatus, NewJob
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.registry import WorkerInfo
from tests.waits import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.system]

CONFIG = {
    "models": {
        "m": {
            "handler": "synthetic",
            "params": {"base_ms": 1, "per_token_ms": 0.01},
            "buckets": [128],
            "autoscaling": {"min_replicas": 1, "max_replicas": 4, "warm_pool": {"size": 1}},
        }
    },
    "worker": {"heartbeat_s": 0.3, "heartbeat_ttl_s": 3},
}
POOL = WarmPoolConfig(size=1)


@pytest.fixture
def setup(
    tmp_path: Path, redis_url: str
) -> Iterator[tuple[LocalBackend, QueueClient, SluiceConfig]]:
    path = tmp_path / "sluice.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    cfg = load_config(path)
    client = QueueClient(connect(redis_url), dict(cfg.models))
    backend = LocalBackend(
        cfg, path, redis_url, log_dir=tmp_path / "logs", control=redis_control(client)
    )
    yield backend, client, cfg
    backend.close(timeout_s=10)
    client.redis.close()


def _live(client: QueueClient) -> list[WorkerInfo]:
    return client.run(registry.list_workers_call("m"))[0]


def _by_state(client: QueueClient, state: str) -> list[WorkerInfo]:
    return [w for w in _live(client) if w.state == state]


def _sync(backend: LocalBackend, client: QueueClient) -> list[WorkerInfo]:
    live = _live(client)
    backend.observe("m", live)
    return live


def test_promote_first_refill_behind_replace_a_killed_one_and_trim(
    setup: tuple[LocalBackend, QueueClient, SluiceConfig],
) -> None:
    backend, client, cfg = setup
    backend.scale("m", 1, [])  # one serving worker
    backend.keep_pool("m", POOL)  # and one parked
    assert backend.current("m") == 1 and len(backend.parked("m")) == 1
    wait_until(
        lambda: len(_by_state(client, "ready")) == 1 and len(_by_state(client, "standby")) == 1,
        60,
        "a ready and a parked worker",
    )
    parked_id = _by_state(client, "standby")[0].id
    obs = Observer(client, dict(cfg.models)).read("m")
    assert obs is not None and (obs.observation.parked, obs.observation.ready) == (1, 1)

    # A scale-up to 2 promotes the parked worker (no new serving process) and refills.
    _sync(backend, client)
    spawned = len(backend.models["m"].workers)
    backend.scale("m", 2, _live(client))
    assert backend.current("m") == 2
    assert len(backend.models["m"].workers) == spawned + 1  # the refill, parked
    wait_until(
        lambda: any(w.id == parked_id and w.state == "ready" for w in _live(client)),
        30,
        "the promoted worker ready",
    )
    wait_until(lambda: len(_by_state(client, "standby")) == 1, 60, "the refill parked")
    # Jobs are served, by the promoted worker among others.
    ids = [s.id for s in client.submit("m", [NewJob("a b c", "128", 3) for _ in range(40)])]
    wait_until(
        lambda: all(client.get(i).status == JobStatus.SUCCEEDED for i in ids), 30, "jobs done"
    )
    promoted = next(w for w in _live(client) if w.id == parked_id)
    assert "promote_s" in promoted.extra

    # SIGKILL the parked refill: it is replaced by another parked worker, not counted
    # as serving capacity, and nothing is restarted as a serving worker.
    victim = _by_state(client, "standby")[0]
    os.kill(victim.pid, signal.SIGKILL)
    wait_until(
        lambda: (
            backend.tick(0.0),
            any(w.id != victim.id and w.parked for w in backend.parked("m")),
        )[1],
        30,
        "a replacement parked worker",
    )
    assert backend.current("m") == 2 and not backend.models["m"].restarts_due
    left = backend.parked("m")[0]
    wait_until(
        lambda: left.id in {w.id for w in _by_state(client, "standby")},
        60,
        "the replacement parked",
    )

    # A pool trimmed to 0 drains its parked worker: it exits 0 and deregisters.
    backend.keep_pool("m", WarmPoolConfig(size=0))
    assert left.proc.wait(30) == 0
    wait_until(lambda: left.id not in {w.id for w in _live(client)}, 30, "the parked worker gone")
    assert backend.current("m") == 2


def test_a_scale_down_parks_a_serving_worker_while_a_refill_loads(
    setup: tuple[LocalBackend, QueueClient, SluiceConfig],
) -> None:
    backend, client, _ = setup
    backend.keep_pool("m", WarmPoolConfig(size=0))  # no pool until both serve
    backend.scale("m", 2, [])
    wait_until(lambda: len(_by_state(client, "ready")) == 2, 60, "two ready workers")
    backend.keep_pool("m", POOL)  # the refill starts loading now
    live = _sync(backend, client)
    loading = backend.parked("m")[0]
    assert not any(w.id == loading.id and w.state == "standby" for w in live)
    backend.scale("m", 1, live)
    # The loading refill is stopped (SIGTERM; one still importing has no handler yet and
    # ends by the signal itself: it held nothing); one ready worker parks instead.
    assert loading.proc.wait(30) in (0, -signal.SIGTERM)
    wait_until(
        lambda: len(_by_state(client, "standby")) == 1 and len(_by_state(client, "ready")) == 1,
        30,
        "one parked, one serving",
    )
    assert backend.current("m") == 1 and len(backend.parked("m")) == 1


def test_at_max_replicas_the_pool_is_empty_and_a_scale_down_parks_into_it(
    setup: tuple[LocalBackend, QueueClient, SluiceConfig],
) -> None:
    backend, client, cfg = setup
    top = cfg.models["m"].autoscaling.max_replicas
    backend.scale("m", top, [])
    backend.keep_pool("m", POOL)  # nothing left to promote into: no refill at the max
    assert backend.parked("m") == [] and len(backend.models["m"].workers) == top
    wait_until(lambda: len(_by_state(client, "ready")) == top, 60, "every worker ready")
    backend.scale("m", top - 1, _sync(backend, client))
    # The pool was short: a serving worker parks instead of stopping, nothing starts.
    wait_until(lambda: len(_by_state(client, "standby")) == 1, 30, "a parked worker")
    assert len(backend.models["m"].workers) == top
    assert backend.current("m") == top - 1 and len(backend.parked("m")) == 1
    assert all(w.draining_since is None for w in backend.models["m"].workers)
