"""The probe the images and manifests use (deploy/docker/sluice_probe.py), run
against the worker's real metrics endpoint: ready only while the worker is; and
the notifier's probes against a real `sluice notifier`."""

from __future__ import annotations

import base64
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser as pp
import pytest
import redis
import yaml

from sluice.cost import CostEstimator
from sluice.jobs import NewJob
from sluice.local.children import Children
from sluice.queue import QueueClient
from sluice.registry import WORKER_STATES
from tests.conftest import make_config
from tests.kit.code_facts import DEPLOY
from tests.kit.deploy import config_in, containers, find, load_yaml
from tests.kit.promql import metric_names
from tests.waits import wait_until
from workers.metrics import WorkerMetrics

PROBE = DEPLOY / "docker" / "sluice_probe.py"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"


def _load_probe_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("sluice_probe", PROBE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sluice_probe = _load_probe_module()


def probe(*args: str) -> int:
    out = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, timeout=20)
    return out.returncode


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served() -> Iterator[tuple[WorkerMetrics, int]]:
    metrics = WorkerMetrics("m")
    port, server = metrics.serve(0, addr="127.0.0.1")
    yield metrics, port
    server.shutdown()
    server.server_close()  # shutdown() leaves the listening socket open


def test_worker_ready_follows_the_state_gauge(served: tuple[WorkerMetrics, int]) -> None:
    metrics, port = served
    seen = {}
    for state in WORKER_STATES:
        metrics.set_state(state)
        seen[state] = probe("worker-ready", str(port))
    assert seen == {s: (0 if s in ("ready", "standby") else 1) for s in WORKER_STATES}


def test_url_mode(served: tuple[WorkerMetrics, int]) -> None:
    _, port = served
    assert probe("url", f"http://127.0.0.1:{port}/metrics") == 0
    assert probe("url", f"http://127.0.0.1:{free_port()}/healthz") == 1
    assert probe("worker-ready", str(free_port())) == 1
    assert probe("bogus") == 2


@pytest.mark.parametrize(
    ("argv", "worker"),
    [
        (["/opt/venv/bin/python3", "/opt/venv/bin/sluice", "worker", "--model", "m"], True),
        (["python", "-m", "sluice", "worker", "-c", "x"], True),
        (["python", "-c", "from sluice.cli import main; main()", "worker"], True),
        (["/opt/venv/bin/python3", "/opt/venv/bin/sluice", "gateway"], False),
        (["/opt/venv/bin/python3", "/opt/venv/bin/sluice", "autoscaler", "worker"], False),
        (["sleep", "worker"], False),
        ([], False),
    ],
)
def test_drain_recognises_worker_processes(argv: list[str], worker: bool) -> None:
    assert sluice_probe.is_sluice_worker(argv) is worker


def test_drain_scans_proc_and_filters_by_parent(tmp_path: Path) -> None:
    def fake(pid: int, ppid: int, argv: list[str]) -> None:
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (d / "stat").write_text(f"{pid} (py (x) y) S {ppid} 1 1 0")

    fake(10, 1, ["/opt/venv/bin/python3", "/opt/venv/bin/sluice", "worker", "-m", "m"])
    fake(11, 7, ["python", "-m", "sluice", "worker"])
    fake(12, 1, ["/opt/venv/bin/python3", "/opt/venv/bin/sluice", "gateway"])
    (tmp_path / "self").mkdir()
    assert sluice_probe.worker_pids(tmp_path) == [10, 11]
    assert sluice_probe.worker_pids(tmp_path, parent=7) == [11]


BATCH_S = 20


@pytest.mark.redis
@pytest.mark.system
def test_real_worker_is_ready_after_warmup_and_not_while_draining(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    """The k8s probe and preStop hook end to end: a `sluice worker` process is not
    ready, then ready; `sluice-probe drain` returns at once, the worker is not
    ready while it finishes the batch it holds, then exits 0."""
    # One 20 s batch: the drain below starts while it runs, and a probe that
    # answers in under half of it did not wait for it, however slow the machine.
    cfg = make_config(
        params={"base_ms": BATCH_S * 1000, "per_token_ms": 0},
        batching={"max_batch": 1, "lease_s": 2 * BATCH_S},
    )
    path = tmp_path / "sluice.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json", exclude_none=True)))
    port = free_port()
    children = Children(tmp_path / "logs")
    args = ["worker", "-c", str(path), "-m", "m", "--redis-url", redis_url]
    proc = children.spawn("worker", [*args, "--metrics-port", str(port), "--no-overlap"]).proc
    try:
        wait_until(lambda: probe("worker-ready", str(port)) == 0, timeout_s=30, every_s=0.1)
        qc = QueueClient(r, dict(cfg.models))
        est = CostEstimator(cfg.model("m")).estimate("hello")
        qc.submit("m", [NewJob("hello", est.bucket, est.cost)])
        wait_until(lambda: qc.stats("m").in_flight == 1, timeout_s=10, every_s=0.1)
        # --parent: only this test's child, never another worker on this machine.
        started = time.monotonic()
        assert probe("drain", "--parent", str(os.getpid())) == 0
        assert time.monotonic() - started < BATCH_S / 2, "a preStop hook must not wait"
        wait_until(
            lambda: probe("worker-ready", str(port)) == 1, timeout_s=BATCH_S / 2, every_s=0.1
        )
        assert proc.poll() is None, "still finishing the batch it holds"
        assert proc.wait(timeout=3 * BATCH_S) == 0
        stats = qc.stats("m")
        assert stats.in_flight == 0 and stats.counters.get("succeeded") == 1
    finally:
        children.stop(children.all, timeout_s=0)


def _absence_alert_series() -> str:
    """The series the alert that fires when no notifier runs waits for."""
    rules = [r for g in load_yaml(ALERTS)["groups"] for r in g["rules"]]
    (name,) = [
        sel
        for r in rules
        if isinstance(e := pp.parse(r["expr"]), pp.Call) and e.func.name == "absent"
        for sel in metric_names(r["expr"])
        if sel.startswith("sluice_webhook_")
    ]
    return name


@pytest.mark.redis
@pytest.mark.system
def test_real_notifier_answers_its_probes_and_stops_on_sigterm(
    tmp_path: Path, redis_url: str, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    """`sluice notifier` with the deploy config's webhooks block: the manifest's
    liveness and readiness path answers on webhooks.metrics_port, the series the
    absence alert watches is there, and SIGTERM ends it with 0 inside the grace
    period."""
    (d,) = find(rendered["base"], "Deployment", "sluice-notifier")
    (c,) = containers(d)
    paths = {c[p]["httpGet"]["path"] for p in ("livenessProbe", "readinessProbe")}
    grace_s = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    deploy_cfg = config_in(rendered["base"])
    webhooks = deploy_cfg.webhooks.model_dump(mode="json", exclude_none=True)
    port = free_port()
    webhooks["metrics_port"] = port
    cfg = make_config().model_dump(mode="json", exclude_none=True) | {"webhooks": webhooks}
    path = tmp_path / "sluice.yaml"
    path.write_text(yaml.safe_dump(cfg))
    secret = "whsec_" + base64.b64encode(b"sluice-deploy-test-secret-0123456").decode()
    env = os.environ | {str(deploy_cfg.webhooks.secret_env): secret}
    children = Children(tmp_path / "logs", env=env)
    proc = children.spawn("notifier", ["notifier", "-c", str(path), "--redis-url", redis_url]).proc
    try:
        for p in sorted(paths):
            wait_until(
                lambda p=p: probe("url", f"http://127.0.0.1:{port}{p}") == 0,
                timeout_s=30,
                every_s=0.1,
            )
        series = _absence_alert_series()
        wait_until(
            lambda: (
                f'{series}{{model="m"}}'
                in sluice_probe.fetch(f"http://127.0.0.1:{port}/metrics")[1]
            ),
            timeout_s=15,
            every_s=0.1,
        )
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=grace_s) == 0
        assert time.monotonic() - started < grace_s
    finally:
        children.stop(children.all, timeout_s=0)
