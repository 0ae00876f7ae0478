"""``sluice redis --replicas N --sentinels M`` as a user runs it, and the Sentinel
settings that can never work: each stops a command at start with exit 2 and one
line naming it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
import redis
from typer.testing import CliRunner

from sluice.cli import app
from sluice.connection import parse_url, sync_client
from sluice.local.children import Children
from tests.conftest import EXAMPLE_CONFIG
from tests.kit.cli import first_line
from tests.waits import HUNG_S, wait_until

pytestmark = [pytest.mark.system]
SLUICE = [sys.executable, "-m", "sluice"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SLUICE, *args], capture_output=True, text=True, timeout=60, env=os.environ.copy()
    )


@pytest.fixture(scope="module")
def group(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    children = Children(tmp_path_factory.mktemp("sentinels"))
    child = children.spawn("redis", ["redis", "--replicas", "1", "--sentinels", "3"])
    try:
        yield child.proc, first_line(child)
    finally:
        children.stop(children.all, timeout_s=0)


def _server_pid(parent: int, port: int) -> int:
    for child in psutil.Process(parent).children():
        if f":{port}" in " ".join(child.cmdline()) or any(
            c.laddr.port == port for c in child.net_connections(kind="tcp")
        ):
            return child.pid
    raise AssertionError(f"no child listens on {port}")


def test_bad_settings_stop_at_start_with_exit_2(group: tuple[subprocess.Popen[bytes], str]) -> None:
    _, url = group
    hosts = url.split("://", 1)[1].split("/", 1)[0]
    cfg = str(EXAMPLE_CONFIG)
    cases = [
        (f"redis+sentinel://{hosts}/nope/0", "the sentinels know no service 'nope'"),
        ("redis+sentinel://127.0.0.1:1,127.0.0.1:2/sluice/0", "no sentinel answered"),
        ("redis+sentinel://127.0.0.1:1", "needs the service name"),
    ]
    commands = (["status"], ["worker", "-m", "minilm"], ["gateway"], ["autoscaler"], ["notifier"])
    for bad, says in cases:
        for command in commands:  # in process: the same code path, without 15 interpreters
            saved = dict(os.environ)  # the gateway command exports its URL and config
            try:
                done = CliRunner().invoke(app, [*command, "-c", cfg, "--redis-url", bad])
            finally:
                os.environ.clear()
                os.environ.update(saved)
            assert done.exit_code == 2, (command, bad, done.output)
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and says in lines[0], (command, done.stderr)
    # And once as a real process, as a supervisor would see it.
    done = run("worker", "-m", "minilm", "-c", cfg, "--redis-url", cases[1][0])
    assert done.returncode == 2 and "no sentinel answered" in done.stderr, done.stderr


def test_replicas_without_sentinels_is_refused() -> None:
    done = run("redis", "--replicas", "1")
    assert done.returncode == 2 and "go together" in done.stderr


def test_rq_queues_work_through_a_sentinel_url(group: tuple[subprocess.Popen[bytes], str]) -> None:
    """Bulk jobs' RQ may live behind Sentinel (bulk.redis_url or the main URL)."""
    from rq.job import Job

    from sluice.bulk.rq_jobs import rq_connection, rq_queue
    from sluice.config import parse_config

    _, url = group
    cfg = parse_config({"models": {"m": {"handler": "synthetic"}}, "bulk": {"redis_url": url}})
    conn = rq_connection(cfg, "redis://127.0.0.1:1/0", read_timeout_s=5.0)  # bulk.redis_url wins
    try:
        job = rq_queue(cfg, conn).enqueue("builtins.len", "abc")
        assert Job.fetch(job.id, connection=conn).get_status() == "queued"
        assert rq_queue(cfg, conn).job_ids == [job.id]
    finally:
        rq_queue(cfg, conn).empty()
        conn.close()


def test_the_sentinels_run_the_advised_settings(group: tuple[subprocess.Popen[bytes], str]) -> None:
    # docs/reliability.md advises these: with down-after-milliseconds 1000 a
    # sentinel called a just-promoted primary down and failed over again, to the
    # old primary restarted empty. Read back from every sentinel, as in force.
    _, url = group
    t = parse_url(url)
    for host, port in t.nodes:
        s = redis.Redis(host, port, socket_timeout=HUNG_S, decode_responses=True)
        try:
            m: Any = s.sentinel_master(t.service_name)
        finally:
            s.close()
        assert int(m["down-after-milliseconds"]) == 5000
        assert int(m["failover-timeout"]) == 60000
        assert int(m["quorum"]) == 2  # a majority of the 3 sentinels


# Last: it kills the group's primary and stops the group.
def test_the_printed_url_follows_a_failover_and_sigterm_stops_every_process(
    group: tuple[subprocess.Popen[bytes], str],
) -> None:
    proc, url = group
    t = parse_url(url)
    assert t.kind == "sentinel" and len(t.nodes) == 3 and t.service_name == "sluice"
    r = sync_client(url)
    try:
        r.set("k", "v")
        assert r.execute_command("WAIT", 1, int(HUNG_S * 1000)) == 1  # on the replica too
        primary = r.connection_pool.get_master_address()
        os.kill(_server_pid(proc.pid, int(primary[1])), signal.SIGKILL)

        def written() -> bool:
            try:
                return bool(r.set("after", "1"))
            except Exception:  # noqa: BLE001 - the switch: connection errors until promoted
                return False

        wait_until(written, HUNG_S * 2, "a write through the same client after the failover")
        assert r.connection_pool.get_master_address() != primary
        assert r.get("k") == "v"  # acknowledged by a replica before the kill: kept
    finally:
        r.close()
    children = psutil.Process(proc.pid).children()
    assert proc.poll() is None  # a group outlives a killed node
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(HUNG_S) == 0
    gone, alive = psutil.wait_procs(children, timeout=HUNG_S)
    assert alive == []
