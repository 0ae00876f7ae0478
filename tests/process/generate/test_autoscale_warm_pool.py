"""Warm pools for generative workers (ADR 0149): the local backend parks, promotes
and parks back a causal-lm model's workers as any other's, each holding the cores
its ``params.threads`` asks for. Stand-in worker processes (the argv and thread
count they were given, then a wait for SIGTERM); no Redis."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from autoscaler.backends.local import LocalBackend
from sluice.config import WarmPoolConfig, parse_config
from sluice.registry import PARK, PROMOTE
from tests.factories import worker_info
from tests.waits import wait_until

pytestmark = pytest.mark.system  # starts stand-in worker processes

FAKE = r"""
import json, os, signal, sys, time
args = sys.argv[1:]
wid = args[args.index("--worker-id") + 1]
with open(os.path.join(os.environ["FAKE_DIR"], wid + ".json"), "w") as f:
    json.dump({"args": args, "threads": os.environ.get("SLUICE_NUM_THREADS")}, f)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(0.05)
"""

GENERATIVE = {
    "handler": "causal-lm",
    "params": {"model": "tiny:4x256", "threads": 1},
    "generate": {"slots": 8},
    "autoscaling": {"min_replicas": 0, "max_replicas": 2, "warm_pool": {"size": 1}},
}


class Control:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []

    def __call__(self, model: str, worker_id: str, command: str) -> None:
        self.sent.append((model, worker_id, command))


def test_a_generative_models_pool_parks_and_promotes_with_its_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE)
    monkeypatch.setenv("FAKE_DIR", str(tmp_path))
    monkeypatch.delenv("SLUICE_NUM_THREADS", raising=False)
    # 6 cores, max_replicas 2: without reading params.threads a worker would hold 3.
    cfg = parse_config({"models": {"lm": GENERATIVE}, "autoscaler": {"cpu_cores": 6}})
    control = Control()
    be = LocalBackend(
        cfg,
        tmp_path / "sluice.yaml",
        "redis://127.0.0.1:1/0",
        command=[sys.executable, str(script)],
        log_dir=tmp_path / "logs",
        control=control,
    )
    try:
        be.scale("lm", 1, [])
        be.keep_pool("lm", WarmPoolConfig(size=1))
        assert (be.current("lm"), len(be.parked("lm")), be.cores.used) == (1, 1, 1)
        started = wait_until(
            lambda: (
                sorted(tmp_path.glob("local-*.json"))
                if len(list(tmp_path.glob("local-*.json"))) == 2
                else []
            ),
            10,
            "a serving and a parked worker",
            every_s=0.05,
        )
        time.sleep(0.05)  # the newest file may be mid-write
        runs = [json.loads(f.read_text()) for f in started]
        assert [r["threads"] for r in runs] == ["1", "1"]
        assert sum("--parked" in r["args"] for r in runs) == 1
        parked = be.parked("lm")[0].id

        be.scale("lm", 2, [])  # the parked worker is promoted: it takes its one core
        assert control.sent == [("lm", parked, PROMOTE)]
        assert (be.current("lm"), be.cores.used) == (2, 2)

        live = [worker_info(id=w.id, model="lm", pid=0) for w in be.models["lm"].workers]
        be.scale("lm", 1, live)  # back down: a worker parks again rather than exiting
        assert control.sent[-1][2] == PARK
        assert (be.current("lm"), len(be.parked("lm")), be.cores.used) == (1, 1, 1)
    finally:
        be.close(timeout_s=5)
    assert be.cores.used == 0
