"""``sluice notifier`` as a real process: a notifier killed mid-delivery loses
nothing (a second one delivers the same message once the lease lapses), and a bad
secret stops it at start with exit 2 and one line."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import yaml
from standardwebhooks.webhooks import Webhook as Verifier
from typer.testing import CliRunner

from sluice.cli import app
from sluice.jobs import NewJob, Outcome, Webhook
from sluice.local.children import Child, Children
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.kit.receiver import receiving
from tests.kit.webhooks import SECRET, SECRET_ENV, hook_config
from tests.waits import HUNG_S, wait_until

WEBHOOKS = {
    "secret_env": SECRET_ENV,
    "allow_networks": ["127.0.0.1/32"],
    "allow_http": True,
    "retry_schedule_s": [0.2],
    "connect_timeout_s": 0.5,
    "timeout_s": 1.0,  # a lease of (0.5 + 1) x 2 + 5 = 8 s
}


def write_config(tmp_path: Path) -> Path:
    path = tmp_path / "sluice.yaml"
    models = {"m": {"handler": "synthetic", "buckets": [32, 128, 512]}}
    path.write_text(yaml.safe_dump({"models": models, "webhooks": WEBHOOKS}))
    return path


def start(path: Path, redis_url: str, secret: str = SECRET, name: str = "notifier") -> Child:
    """``sluice notifier`` through sluice.local.children, its output in logs/<name>.log."""
    env = os.environ | {"SLUICE_REDIS_URL": redis_url, SECRET_ENV: secret}
    return Children(path.parent / "logs", env=env).spawn(name, ["notifier", "--config", str(path)])


def stop(child: Child) -> str:
    """SIGTERM (if still running), its exit within HUNG_S, then its output."""
    if child.alive():
        child.proc.send_signal(signal.SIGTERM)
    child.proc.wait(HUNG_S)
    child.log.close()
    return child.log_path.read_text()


def test_a_notifier_killed_mid_delivery_loses_nothing(tmp_path: Path, redis_url: str) -> None:
    cfg = hook_config(**WEBHOOKS)
    q = QueueClient(connect(redis_url), dict(cfg.models))
    path = write_config(tmp_path)
    with receiving([-1]) as rx:  # the first call is held until released
        job_id = q.submit("m", [NewJob("hi", "32", 1, webhook=Webhook(rx.url))])[0].id
        batch = q.claim("m", "w1")
        q.complete("m", [Outcome.ok(batch.jobs[0].id, [1.0])], "w1")
        first = start(path, redis_url, name="first")
        try:
            wait_until(lambda: len(rx.calls) == 1, what="the first attempt")
            first.proc.kill()  # SIGKILL mid-delivery: no response read, nothing recorded
            first.proc.wait(HUNG_S)
        finally:
            stop(first)
        rx.release.set()
        assert q.get(job_id).webhook["state"] == "pending"  # type: ignore[index]
        second = start(path, redis_url, name="second")
        try:
            wait_until(
                lambda: (q.get(job_id).webhook or {}).get("state") == "delivered",
                what="the second notifier's delivery",
            )
        finally:
            out = stop(second)
        assert second.proc.returncode == 0, out
        assert len(rx.calls) == 2
        a, b = rx.calls
        assert a.headers["webhook-id"] == b.headers["webhook-id"] == f"msg_{job_id}"
        assert a.body == b.body
        Verifier(SECRET).verify(b.body, b.headers)
        assert q.get(job_id).webhook["attempts"] == 2  # type: ignore[index]
    q.redis.close()


def test_a_secret_that_is_not_one_stops_the_notifier_with_exit_2(
    tmp_path: Path, redis_url: str
) -> None:
    p = start(write_config(tmp_path), redis_url, secret="not base64 at all!")
    p.proc.wait(HUNG_S)  # it stops by itself
    out = stop(p)
    assert p.proc.returncode == 2, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[-1].startswith("sluice: error: webhooks secret: not a Standard Webhooks secret")
    assert "not base64" not in out  # the secret itself is never printed


def test_sluice_status_shows_deliveries_and_the_given_up(tmp_path: Path, redis_url: str) -> None:
    from sluice.webhooks.ops import WebhookOps
    from sluice.webhooks.ops import scripts as webhook_scripts

    cfg = hook_config(**WEBHOOKS)
    q = QueueClient(connect(redis_url), dict(cfg.models))
    q.register(webhook_scripts())
    path = write_config(tmp_path)
    hook = Webhook("http://127.0.0.1:9/hook")
    ids = [j.id for j in q.submit("m", [NewJob("a", "32", 1, webhook=hook)] * 2)]
    batch = q.claim("m", "w1")
    q.complete("m", [Outcome.ok(j.id, 1) for j in batch.jobs], "w1")
    ops = WebhookOps(["m"])
    (c,) = q.run(ops.claim("m", "n1", 60_000, 1))
    q.run(ops.done(c, "dead", status=410, error="gone"))

    def status(*args: str) -> str:
        # The command line's own app in this process (as test_operator_actions.py's):
        # a child per look spent about 0.9 CPU s on its imports.
        run = CliRunner().invoke(
            app, ["status", *args, "--config", str(path)], env={"SLUICE_REDIS_URL": redis_url}
        )
        assert run.exit_code == 0, run.output
        return run.stdout

    out = status()
    table = out[out.index("Webhooks") :]
    row = next(line for line in table.splitlines() if line.startswith("│ m "))
    cells = [x.strip() for x in row.strip("│").split("│")]
    assert cells[:3] == ["m", "1", "1"] and cells[4] == "1"  # pending, due, given up
    assert f"given up, newest: {c.id}" in out and "redeliver" in out
    assert "dead (1 attempts, last 410)" in status(c.id)
    other = next(i for i in ids if i != c.id)
    assert "pending (0 attempts)" in status(other)
    q.redis.close()
