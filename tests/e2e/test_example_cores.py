"""``sluice up`` with examples/sluice.yaml, untouched: under a backlog that scales
MiniLM to its most workers, the workers' CPU threads never add up to more than
the machine's cores (two workers of torch's default two threads on two cores
served less than one worker, docs/adr/0125), and ``sluice up`` says how it
divided the machine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from sluice.config import load_config
from sluice.cores import cores_per_worker, machine_cores
from tests.conftest import EXAMPLE_CONFIG
from tests.e2e.upstack import Up, launch, shut_down, wait_for

pytestmark = [pytest.mark.slow]


@pytest.fixture
def example(tmp_path: Path) -> Iterator[Up]:
    stack = launch(yaml.safe_load(EXAMPLE_CONFIG.read_text()), tmp_path)
    yield stack
    shut_down(stack)


def test_the_example_stack_never_oversubscribes_the_cores(example: Up) -> None:
    cfg = load_config(EXAMPLE_CONFIG)
    cores = machine_cores()
    per = cores_per_worker(cfg.models["minilm"], cores)
    most = min(cfg.models["minilm"].autoscaling.max_replicas, cores // per)
    assert any(line.startswith(f"cores: {cores} CPU cores") for line in example.printed)
    texts = [" ".join(["token"] * (8 + i % 40)) for i in range(256)]
    for _ in range(24):  # ~6,000 jobs: minutes of work for one worker, so it scales up
        r = httpx.post(
            f"{example.gateway}/v1/models/minilm/jobs/batch", json={"inputs": texts}, timeout=30
        )
        assert r.status_code == 202, r.text

    held: list[int] = []

    def threads_at_most_cores_until_scaled() -> bool:
        ready = [w for w in example.workers("minilm") if w.state == "ready"]
        threads = [int(w.extra.get("threads", 0)) for w in ready]
        held.append(sum(threads))
        assert sum(threads) <= cores, threads  # at every look, not only at the end
        assert all(t == per for t in threads), threads
        return len(ready) >= most

    wait_for(threads_at_most_cores_until_scaled, 240, f"{most} MiniLM workers")
    assert max(held) == most * per <= cores
