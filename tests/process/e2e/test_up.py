"""End to end through the CLI: ``sluice up`` with real processes.

One stack for the module: results in every bucket of the synthetic model, a
burst that scales it up while a worker is killed with SIGKILL (every job still
finishes, once), a model at zero woken by its first job (from its warm pool),
the CLI's submit and status, signed webhooks, then Ctrl-C leaves no process
behind. No MiniLM here: the bundled model's checks (the banner's curl, its
buckets, a bulk file) run on test_example_stack.py's stack, so the suite loads
torch and the model in one stack instead of two.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from standardwebhooks.webhooks import Webhook as Verifier
from typer.testing import CliRunner

from sluice.cli import app
from sluice.client import Client
from tests.kit.http import HTTP
from tests.kit.receiver import receiving
from tests.kit.upstack import Up, launch, shut_down
from tests.waits import wait_until

pytestmark = [pytest.mark.system]

CONFIG = {
    "models": {
        "synthetic": {
            "handler": "synthetic",
            "params": {"base_ms": 2, "per_token_ms": 0.5},
            "buckets": [32, 128, 512],
            "cost": {"method": "words"},
            # Short leases so a killed worker's jobs come back within a second or two.
            "batching": {"max_batch": 8, "max_batch_tokens": 4096, "lease_s": 1.5},
            "autoscaling": {
                "min_replicas": 1,
                "max_replicas": 4,
                "period_s": 0.5,
                "backlog_drain_s": 3,
                "cold_start_s": 1,
                "scale_down_window_s": 5,
                "metrics_window_s": 4,
                "p99_wait_slo_ms": 1000,
            },
        },
        # Scaled to zero, with an auto-sized warm pool (ADR 0156/0157): one parked
        # worker until the model has history; its first job wakes it.
        "idle": {
            "handler": "synthetic",
            "params": {"base_ms": 2, "per_token_ms": 0.5},
            "buckets": [32],
            "cost": {"method": "words"},
            "autoscaling": {
                "min_replicas": 0,
                "max_replicas": 1,
                "period_s": 0.5,
                "idle_s": 600,
                "warm_pool": {"size": "auto"},
            },
        },
    },
    "worker": {"heartbeat_s": 0.3, "heartbeat_ttl_s": 3},
    "autoscaler": {"drain_timeout_s": 20},
    # the receiver of the webhook test listens on loopback
    "webhooks": {"allow_networks": ["127.0.0.1/32"], "allow_http": True},
}


def gateway_sees_ready(gateway: str) -> bool:
    """Every model kept warm (min_replicas >= 1) has a ready worker."""
    models = HTTP.get(f"{gateway}/v1/models", timeout=5).json()["data"]
    warm = [m for m in models if m["id"] != "idle"]
    return all(m["workers"]["ready"] >= 1 for m in warm)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    stack = launch(CONFIG, tmp_path_factory.mktemp("up"))
    # `sluice up` prints its banner only once the warm models have a ready worker.
    assert stack.ready("synthetic")
    assert gateway_sees_ready(stack.gateway)
    yield stack
    shut_down(stack)


@pytest.mark.parametrize(("words", "bucket"), [(5, "32"), (100, "128"), (400, "512")])
def test_result_in_every_bucket(up: Up, words: int, bucket: str) -> None:
    text = " ".join(["word"] * words)
    with Client(up.gateway) as c:
        job = c.predict("synthetic", text)
    assert job["status"] == "succeeded" and job["bucket"] == bucket
    assert job["result"] == {"tokens": words}


def test_a_model_at_zero_scales_a_worker_up_for_its_first_job(up: Up) -> None:
    """min_replicas 0, warm_pool.size auto: nothing serves until a job comes; the
    autoscaler wakes a worker for it (promoting the parked one) and the job succeeds."""
    wait_until(
        lambda: [w.state for w in up.workers("idle")] == ["standby"],
        60,
        "one parked worker and none serving",
        every_s=0.1,
    )
    (parked,) = up.workers("idle")
    with Client(up.gateway) as c:
        job = c.predict("idle", "wake up")
    assert job["status"] == "succeeded" and job["result"] == {"tokens": 2}

    def served() -> bool:  # the promoted worker's heartbeat counts the job a beat later
        return any(w.id == parked.id and not w.parked and w.jobs >= 1 for w in up.workers("idle"))

    wait_until(served, 30, "the parked worker, promoted, to have served the job", every_s=0.1)


def test_burst_scales_up_and_survives_a_killed_worker(up: Up) -> None:
    sizes = [20 + (i * 37) % 90 for i in range(300)]  # 20..109 words: buckets 32 and 128
    with Client(up.gateway) as c:
        jobs = []
        for start in range(0, len(sizes), 50):
            chunk = [" ".join(["w"] * n) for n in sizes[start : start + 50]]
            jobs += c.submit_many("synthetic", chunk)
        assert len({j["id"] for j in jobs}) == len(sizes)
        wait_until(
            lambda: up.ready("synthetic") >= 2, 60, "the autoscaler to add workers", every_s=0.2
        )
        wait_until(
            lambda: any(w.busy for w in up.workers("synthetic")), 10, "a busy worker", every_s=0.2
        )
        victim = next(w for w in up.workers("synthetic") if w.busy)
        os.kill(victim.pid, signal.SIGKILL)
        finished = [c.result(j["id"], timeout_s=120) for j in jobs]
    # Every job finished exactly once as the client sees it, with its own result.
    assert [f["id"] for f in finished] == [j["id"] for j in jobs]
    assert all(f["status"] == "succeeded" for f in finished)
    assert [f["result"]["tokens"] for f in finished] == sizes
    # The killed worker's leased jobs were redelivered and ran again elsewhere.
    assert any(f["attempts"] >= 2 for f in finished)
    with up.queue() as q:
        stats = q.stats("synthetic")
    assert stats.queued == 0 and stats.dead_lettered == 0


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def sluice(*args: str) -> Ran:
    """``sluice ARGS``: the command line's own app in this process, as in
    test_operator_actions.py (``python -m sluice`` itself runs the stack): a child per
    command spent about 0.9 CPU s on its imports."""
    done = CliRunner().invoke(app, list(args))
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raise done.exception
    return Ran(done.exit_code, done.stdout, done.stderr)


def test_submit_and_status_commands(up: Up) -> None:
    out = sluice("submit", "synthetic", "a b c", "d e", "--url", up.gateway, "--json-out")
    assert out.returncode == 0, out.stderr
    jobs = json.loads(out.stdout)
    assert [j["result"] for j in jobs] == [{"tokens": 3}, {"tokens": 2}]
    table = sluice("submit", "synthetic", "x y", "--url", up.gateway)
    assert table.returncode == 0 and "succeeded" in table.stdout
    missing = sluice("submit", "nosuch", "x", "--url", up.gateway)
    assert missing.returncode == 1 and "404" in missing.stderr
    status = sluice("status", "--config", str(up.config_path), "--redis-url", up.redis_url)
    assert status.returncode == 0, status.stderr
    assert "synthetic" in status.stdout and "ready" in status.stdout
    one = sluice(
        "status", jobs[0]["id"], "--config", str(up.config_path), "--redis-url", up.redis_url
    )
    assert one.returncode == 0 and "succeeded" in one.stdout


def test_webhooks_are_signed_with_the_stacks_own_secret(up: Up) -> None:
    """`sluice up` runs a notifier and, with no secret configured, makes one (a 0600
    file it names in its banner): a job's and a bulk job's webhooks arrive signed."""
    line = next(x for x in up.printed if "webhooks signed with the secret in" in x)
    secret_file = Path(line.split(" in ", 1)[1].strip())
    assert secret_file.stat().st_mode & 0o777 == 0o600
    verifier = Verifier(secret_file.read_text().strip())
    with receiving() as rx:
        hook = {"url": rx.url, "events": ["succeeded"]}
        r = HTTP.post(
            f"{up.gateway}/v1/models/synthetic/jobs",
            json={"input": "call me back", "webhook": hook},
            timeout=30,
        )
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]
        wait_until(lambda: len(rx.calls) >= 1, 60, "the job's webhook", every_s=0.2)
        body = verifier.verify(rx.calls[0].body, rx.calls[0].headers)
        assert body["type"] == "job.succeeded" and body["data"]["id"] == job_id
        assert body["data"]["result"] == {"tokens": 3}
        lines = "\n".join(json.dumps({"input": f"line {i}"}) for i in range(3))
        r = HTTP.post(
            f"{up.gateway}/v1/models/synthetic/bulk",
            params={"webhook_url": rx.url, "webhook_events": "completed"},
            content=lines,
            headers={"Content-Type": "application/x-ndjson"},
            timeout=30,
        )
        assert r.status_code == 202, r.text
        bulk_id = r.json()["id"]
        wait_until(lambda: len(rx.calls) >= 2, 120, "the bulk job's webhook", every_s=0.2)
        body = verifier.verify(rx.calls[1].body, rx.calls[1].headers)
        assert body["type"] == "bulk.completed" and body["data"]["id"] == bulk_id
        assert body["data"]["counts"]["succeeded"] == 3

    def hook() -> dict[str, object]:
        return dict(HTTP.get(f"{up.gateway}/v1/jobs/{job_id}", timeout=30).json()["webhook"])

    wait_until(lambda: hook()["state"] == "delivered", 30, "the delivery recorded", every_s=0.2)
    assert hook()["last_status"] == 200 and hook()["attempts"] == 1


def test_ctrl_c_drains_and_leaves_no_process(up: Up) -> None:
    tree = psutil.Process(up.proc.pid).children(recursive=True)
    assert len(tree) >= 4  # redis, gateway, autoscaler and its workers
    up.proc.send_signal(signal.SIGINT)
    assert up.proc.wait(90) == 0
    gone, alive = psutil.wait_procs(tree, timeout=10)
    assert not alive, f"left behind: {[p.pid for p in alive]}"
