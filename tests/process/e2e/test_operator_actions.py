"""Operators in control, end to end on ``sluice up`` with real processes, the
``sluice admin`` CLI and the REST API.

Dead letters and purges (docs/adr/0153): a job dead-letters, is listed and
redriven by the CLI, and its id's long-poll ends succeeded; queued jobs are
purged, and a long-poll and an SSE stream waiting on them end cancelled; the
audit trail names the admin key. Pause and stop (ADR 0154): pause and resume
through ``sluice admin`` across a worker restart, and a running job stopped by a
cancel or by ``limits.max_run_ms`` without its worker counting it as a failure.

One stack for the module (it was one per action kind: a ``sluice up`` stack costs
its gateway, autoscaler, notifier and Redis to start): the ``switched`` model
(files switch its inputs to fail or to hold the one worker) and the ``slow``
synthetic model, whose long inputs model minutes of compute (only a stop lets
them end early), a worker each, short heartbeats (the renewals that carry the
news of a stop), and an admin key every call carries.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from sluice.apikeys import hash_key
from sluice.cli import app
from sluice.config import REDIS_URL_ENV
from tests.kit.http import HTTP
from tests.kit.upstack import Up, launch, shut_down
from tests.waits import wait_until

pytestmark = [pytest.mark.system]
ADMIN_KEY = "sk_ops-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {ADMIN_KEY}"}
M = "switched"
MODEL = "slow"
SLOW_INPUT = " ".join(["w"] * 400)  # 400 x 200 ms: 80 s of modelled compute


def config(flags: Path) -> dict[str, Any]:
    return {
        "models": {
            M: {
                "handler": "tests.kit.fault_handlers:SwitchedHandler",
                "params": {
                    "base_ms": 1,
                    "poison_flag": str(flags / "poison"),
                    "hold_flag": str(flags / "hold"),
                },
                "buckets": [32],
                "cost": {"method": "words"},
                "batching": {"max_batch": 1, "max_attempts": 1, "lease_s": 30},
                "autoscaling": {"min_replicas": 1, "max_replicas": 1, "cold_start_s": 1},
            },
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
        "worker": {"heartbeat_s": 0.2, "heartbeat_ttl_s": 3, "overlap": False},
        "bulk": {"rq_workers": 0},  # no bulk job here: one process fewer to start
        "autoscaler": {"drain_timeout_s": 5, "restart_backoff_s": 0.2},
        "auth": {"keys": [{"name": "ops", "hash": hash_key(ADMIN_KEY), "admin": True}]},
    }


def admin(up: Up, *args: str) -> Any:
    """``sluice admin <args> --json-out`` against the stack (the command line's own
    app, in this process: a child per verb would add seconds of imports); its JSON."""
    env = {"SLUICE_URL": up.gateway, "SLUICE_ADMIN_KEY": ADMIN_KEY}
    done = CliRunner().invoke(app, ["admin", *args, "--json-out"], env=env)
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def submit(http: httpx.Client, text: str) -> str:
    resp = http.post(f"/v1/models/{M}/jobs", json={"input": text})
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def long_poll(http: httpx.Client, job: str) -> str:
    return str(http.get(f"/v1/jobs/{job}", params={"wait": 30}, timeout=40).json()["status"])


def sse_end(up: Up, job: str) -> str:
    """The status of the job's last SSE ``status`` event, once the stream ends."""
    with HTTP.stream("GET", f"{up.gateway}/v1/jobs/{job}/events", headers=HEADERS, timeout=40) as r:
        text = r.read().decode()
    statuses = [json.loads(ln[5:])["status"] for ln in text.splitlines() if ln.startswith("data:")]
    return statuses[-1]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Up, Path]]:
    flags = tmp_path_factory.mktemp("flags")
    up = launch(config(flags), tmp_path_factory.mktemp("up"))
    assert up.ready(M) and up.ready(MODEL)
    yield up, flags
    shut_down(up)


@pytest.fixture
def up(stack: tuple[Up, Path]) -> Up:
    return stack[0]


def test_redrive_ends_the_same_id_succeeded_and_purge_ends_waiters_cancelled(
    stack: tuple[Up, Path],
) -> None:
    up, flags = stack
    with httpx.Client(base_url=up.gateway, headers=HEADERS, timeout=30) as http:
        (flags / "poison").touch()
        bad = submit(http, "poison pill")
        assert long_poll(http, bad) == "failed"
        listed = admin(up, "dead-letters", "list", M)
        (item,) = listed["items"]
        assert item["id"] == bad and item["error"]["message"] == "poison input"
        assert item["last_worker"] and item["attempts"] == 1
        (flags / "poison").unlink()  # the cause is fixed: redrive by id
        done = admin(up, "dead-letters", "redrive", M, "--id", bad, "--yes")
        assert (done["action"], done["count"]) == ("dead_letters.redrive", 1)
        assert long_poll(http, bad) == "succeeded"  # the same id, now with a result

        # The one worker is held by a job, so what follows stays queued.
        (flags / "hold").touch()
        held = submit(http, "hold on")
        wait_until(lambda: http.get(f"/v1/jobs/{held}").json()["status"] == "running")
        polled, streamed = submit(http, "one"), submit(http, "two")
        with ThreadPoolExecutor(2) as pool:
            poll_end = pool.submit(long_poll, http, polled)
            sse = pool.submit(sse_end, up, streamed)
            wait_until(
                lambda: "sluice_gateway_longpoll_waiters 1.0" in http.get("/metrics").text,
                what="the long-poll waits",
            )
            purged = admin(up, "purge", M, "--yes")
            assert purged["count"] == 2
            assert poll_end.result(timeout=30) == "cancelled"
            assert sse.result(timeout=30) == "cancelled"
        (flags / "hold").unlink()
        assert long_poll(http, held) == "succeeded"  # a running job is not purged

    trail = admin(up, "audit", "--model", M)
    assert [(e["actor"], e["action"], e["count"]) for e in trail] == [
        ("ops", "queue.purge", 2),
        ("ops", "dead_letters.redrive", 1),
    ]


def sluice(up: Up, *args: str) -> str:
    """``sluice ARGS`` against the stack, with the admin key; its output (exit 0
    asserted). The command line's own app, in this process, as ``admin``'s."""
    env = {"SLUICE_URL": up.gateway, REDIS_URL_ENV: up.redis_url, "SLUICE_ADMIN_KEY": ADMIN_KEY}
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
    resp = HTTP.get(
        f"{up.gateway}/v1/jobs/{job_id}", params=params, headers=HEADERS, timeout=wait_s + 10
    )
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def submit_slow(up: Up, text: str) -> str:
    resp = HTTP.post(
        f"{up.gateway}/v1/models/{MODEL}/jobs", json={"input": text}, headers=HEADERS, timeout=10
    )
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
    try:  # the stack's later tests need the model served, whatever fails here
        models = HTTP.get(f"{up.gateway}/v1/models", headers=HEADERS, timeout=10).json()["data"]
        (listed,) = [m for m in models if m["id"] == MODEL]
        assert listed["paused"] is True and listed["pause"]["refuse_submits"] is False
        job_id = submit_slow(up, "a b")  # accepted, and held
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
    finally:
        resumed = sluice(up, "admin", "resume", MODEL)
    assert "resumed" in resumed
    assert job(up, job_id, wait_s=20)["status"] == "succeeded"
    audit = sluice(up, "admin", "audit", "--model", MODEL)
    assert "resume" in audit and "pause" in audit


def not_busy(up: Up) -> Any:
    w = the_worker(up)
    return w if w is not None and not w.busy else None


def test_a_cancelled_running_job_is_stopped_and_its_worker_stays_healthy(up: Up) -> None:
    job_id = submit_slow(up, SLOW_INPUT)
    wait_until(lambda: job(up, job_id)["status"] == "running", what="the job to run")
    resp = HTTP.delete(f"{up.gateway}/v1/jobs/{job_id}", headers=HEADERS, timeout=10)
    assert resp.status_code == 200 and resp.json()["previous_status"] == "running"
    # 80 s of compute left: only the stop frees the worker this soon (20 s: hung).
    w = wait_until(
        lambda: not_busy(up), what="the worker to stop the cancelled job", every_s=LOOK_S
    )
    assert w.failures == 0 and w.state == "ready"
    rec = job(up, job_id)
    assert rec["status"] == "cancelled" and rec.get("result") is None
    assert job(up, submit_slow(up, "c d"), wait_s=20)["status"] == "succeeded"


def test_a_job_over_max_run_ms_fails_for_good_and_its_worker_stays_healthy(up: Up) -> None:
    job_id = submit_slow(up, SLOW_INPUT)
    rec = job(up, job_id, wait_s=20)  # 4 s of max_run_ms, then the next renewal
    assert rec["status"] == "failed" and rec["error"]["type"] == "run_time_exceeded"
    assert rec["attempts"] == 1 and rec.get("result") is None  # not retried
    w = wait_until(lambda: not_busy(up), what="the worker to stop the job")
    assert w.failures == 0 and w.state == "ready"
