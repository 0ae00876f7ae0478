"""Operators in control, end to end on ``sluice up`` (ADR 0154): pause and resume
through ``sluice admin`` across a worker restart, and a running job stopped by a
cancel or by ``limits.max_run_ms`` without its worker counting it as a failure.

One stack for the module: one synthetic model whose long inputs model minutes of
compute (only a stop lets them end early), one worker, short heartbeats (the
renewals that carry the news of a stop).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from sluice.cli import app
from sluice.config import REDIS_URL_ENV
from tests.kit.http import HTTP
from tests.kit.upstack import Up, launch, shut_down
from tests.waits import wait_until

pytestmark = [pytest.mark.system]

MODEL = "slow"
SLOW_INPUT = " ".join(["w"] * 400)  # 400 x 200 ms: 80 s of modelled compute
CONFIG = {
    "models": {
        MODEL: {
            "handler": "synthetic",
            "params": {"base_ms": 1, "per_token_ms": 200},
            "buckets": [32, 512],
            "cost": {"method": "words"},
            "batching": {"max_batch": 1, "max_batch_tokens": 512, "lease_s": 3},
            "limits": {"max_run_ms": 4000},
            "autoscaling": {
                "min_replicas": 1,
                "max_replicas": 1,
                "period_s": 0.5,
                "cold_start_s": 1,
            },
        },
    },
    "worker": {"heartbeat_s": 0.2, "heartbeat_ttl_s": 3},
    "bulk": {"rq_workers": 0},  # no bulk job here: one process fewer to start
    "autoscaler": {"drain_timeout_s": 5, "restart_backoff_s": 0.2},
}


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    stack = launch(CONFIG, tmp_path_factory.mktemp("pause"))
    assert stack.ready(MODEL)
    yield stack
    shut_down(stack)


def sluice(up: Up, *args: str) -> str:
    """``sluice ARGS`` against the stack; its output (exit 0 asserted). The command
    line's own app, in this process, as test_operator_actions.py's: a child per
    command spent about 1 CPU s on imports."""
    env = {"SLUICE_URL": up.gateway, REDIS_URL_ENV: up.redis_url}
    done = CliRunner().invoke(app, list(args), env=env)
    assert done.exit_code == 0, done.output
    return done.stdout


# Looks at the workers every 50 ms: one reads the registry on a new connection
# (~5 ms of CPU), and these waits span worker restarts and heartbeats.
LOOK_S = 0.05


def the_worker(up: Up) -> Any:
    workers = [w for w in up.workers(MODEL) if w.state == "ready"]
    return workers[0] if len(workers) == 1 else None


def job(up: Up, job_id: str, wait_s: float = 0) -> dict[str, Any]:
    params = {"wait": wait_s} if wait_s else {}
    resp = HTTP.get(f"{up.gateway}/v1/jobs/{job_id}", params=params, timeout=wait_s + 10)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def submit(up: Up, text: str) -> str:
    resp = HTTP.post(f"{up.gateway}/v1/models/{MODEL}/jobs", json={"input": text}, timeout=10)
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def claims_pass(up: Up, worker_id: str, seconds: float) -> None:
    """Wait until that worker has heartbeated ``seconds`` on from now: it has been
    idle-claiming (every 0.5 s at most) all that while."""
    since = time.time()
    wait_until(
        lambda: any(
            w.id == worker_id and w.heartbeat_at > since + seconds for w in up.workers(MODEL)
        ),
        what=f"worker {worker_id} to go on for {seconds} s",
        every_s=LOOK_S,
    )


def test_a_paused_model_keeps_its_jobs_through_a_worker_restart_until_resumed(up: Up) -> None:
    assert "paused" in sluice(up, "admin", "pause", MODEL)
    listed = HTTP.get(f"{up.gateway}/v1/models", timeout=10).json()["data"][0]
    assert listed["paused"] is True and listed["pause"]["refuse_submits"] is False
    job_id = submit(up, "a b")  # accepted, and held
    first = wait_until(lambda: the_worker(up), what="the ready worker", every_s=LOOK_S)
    claims_pass(up, first.id, 1.0)
    assert job(up, job_id)["status"] == "queued"

    os.kill(first.pid, signal.SIGTERM)  # it drains and exits; the backend restarts one
    second = wait_until(
        lambda: (w := the_worker(up)) is not None and w.id != first.id and w,
        what="a restarted worker",
        every_s=LOOK_S,
    )
    claims_pass(up, second.id, 1.0)
    assert job(up, job_id)["status"] == "queued"  # the pause is Redis', not a process's
    assert "PAUSED" in sluice(up, "status", "--config", str(up.config_path))

    assert "resumed" in sluice(up, "admin", "resume", MODEL)
    assert job(up, job_id, wait_s=20)["status"] == "succeeded"
    audit = sluice(up, "admin", "audit", "--model", MODEL)
    assert "resume" in audit and "pause" in audit


def not_busy(up: Up) -> Any:
    w = the_worker(up)
    return w if w is not None and not w.busy else None


def test_a_cancelled_running_job_is_stopped_and_its_worker_stays_healthy(up: Up) -> None:
    job_id = submit(up, SLOW_INPUT)
    wait_until(lambda: job(up, job_id)["status"] == "running", what="the job to run")
    resp = HTTP.delete(f"{up.gateway}/v1/jobs/{job_id}", timeout=10)
    assert resp.status_code == 200 and resp.json()["previous_status"] == "running"
    # 80 s of compute left: only the stop frees the worker this soon (20 s: hung).
    w = wait_until(
        lambda: not_busy(up), what="the worker to stop the cancelled job", every_s=LOOK_S
    )
    assert w.failures == 0 and w.state == "ready"
    rec = job(up, job_id)
    assert rec["status"] == "cancelled" and rec.get("result") is None
    assert job(up, submit(up, "c d"), wait_s=20)["status"] == "succeeded"


def test_a_job_over_max_run_ms_fails_for_good_and_its_worker_stays_healthy(up: Up) -> None:
    job_id = submit(up, SLOW_INPUT)
    rec = job(up, job_id, wait_s=20)  # 4 s of max_run_ms, then the next renewal
    assert rec["status"] == "failed" and rec["error"]["type"] == "run_time_exceeded"
    assert rec["attempts"] == 1 and rec.get("result") is None  # not retried
    w = wait_until(lambda: not_busy(up), what="the worker to stop the job")
    assert w.failures == 0 and w.state == "ready"
