"""Shared fixtures: one real redis-server per session, flushed per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sluice.config import SluiceConfig, load_config, parse_config
from sluice.errors import SluiceError
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.redis_server import RedisServer, find_redis_server, redis_server_version, start_redis

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_CONFIG = ROOT / "examples" / "sluice.yaml"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Say which redis-server the real-Redis tiers run on (CI runs 7.x, then 6.2)."""
    try:
        binary = find_redis_server()
        line = f"redis-server: {binary} (v{redis_server_version(binary)})"
    except SluiceError as e:
        line = f"redis-server: none ({e})"
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)


# Tiers whose tests start redis-server processes of their own (through the CLI,
# `sluice up` or RedisServer) rather than through the redis_server fixture.
_OWN_SERVER_TIERS = ("bulk", "cli", "e2e", "faults", "redis", "workers")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that runs on a real redis-server ``redis``, so that
    ``make test-redis62`` can run them all again on another Redis version."""
    tests_dir = Path(__file__).resolve().parent
    for item in items:
        tier = Path(str(item.path)).resolve().relative_to(tests_dir).parts[0]
        if tier in _OWN_SERVER_TIERS or "redis_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.redis)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = start_redis()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    r = redis.Redis.from_url(redis_server.url)
    r.flushall()
    r.close()
    yield redis_server.url


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = connect(redis_url)
    yield client
    client.close()


@pytest.fixture
def example_config() -> SluiceConfig:
    return load_config(EXAMPLE_CONFIG)


def make_config(**model_overrides: object) -> SluiceConfig:
    """A config with one model ``m`` (buckets 32/128/512), overridable per section."""
    model: dict[str, object] = {"handler": "synthetic", "buckets": [32, 128, 512]}
    model.update(model_overrides)
    return parse_config({"models": {"m": model}})


@pytest.fixture
def queue_factory(r: redis.Redis):  # type: ignore[no-untyped-def]
    """``queue_factory(**model_overrides) -> QueueClient`` on a flushed real Redis."""

    def make(**overrides: object) -> QueueClient:
        return QueueClient(r, dict(make_config(**overrides).models))

    return make
