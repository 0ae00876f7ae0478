"""Shared fixtures: one real redis-server per session (per xdist worker), flushed
per test; the suite's tiers, chosen by environment variable:

- ``SLUICE_TEST_GATEWAY_REDIS`` (``real``, ``fake`` or ``both``, the default): the
  Redis the gateway tests' ``["fake", "real"]`` fixtures run on. ``make test`` sets
  ``real`` (each gateway test once, on a real server), ``make test-fast`` ``fake``.
- ``SLUICE_HYPOTHESIS_PROFILE`` (``fast``, ``ci``, the default, or ``thorough``):
  every property's example budget.
- ``SLUICE_TEST_REDIS=cluster``: the ``redis_server`` fixture is a Redis Cluster.

Every test has pyproject's 60 s timeout but those marked ``system`` (several
processes, a model load, a stack), which get ``SYSTEM_TIMEOUT_S``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, settings

from sluice.config import SluiceConfig, load_config
from sluice.errors import SluiceError
from sluice.local.redis_server import (
    RedisServer,
    find_redis_server,
    redis_server_version,
    start_redis,
)
from sluice.local.redis_topology import LocalCluster
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.factories import sluice_config

# The component fixtures (and the helpers their tests import) live in tests/kit;
# registered here once so every tier reaches them. Fixture names are unique
# across these modules.
pytest_plugins = [
    "tests.kit.cpuclock",
    "tests.kit.deploy",
    "tests.kit.faults",
    "tests.kit.gateway",
    "tests.kit.schedule",
    "tests.kit.security",
    "tests.kit.webhooks",
    "tests.kit.workers",
]

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


# The suite is laid out by how a test runs, then by component
# (tests/<tier>/<component>/): `pure` (no Redis server, no process; fakeredis is
# fine), `redis` (a real redis-server: the fixtures below, or servers it starts
# in-process), `process` (starts processes: the CLI, `sluice up`, children,
# subprocess, chromium), `measure` (a benchmark or soak run), and `gpu`
# (`make test-gpu`). Shared helpers and the component fixtures live in tests/kit.
PURE_TIER = "pure"
# Tiers whose every test starts processes or a measurement that may run on a
# real redis-server (the CLI, `sluice up`, a benchmark): each is marked `redis`,
# so `make test-fast` runs none of them. In tests/redis the rules below mark a
# test (the fixtures, a "real" parameter, a server it starts), which leaves the
# gateway tests' fakeredis runs to `make test-fast`.
_OWN_SERVER_TIERS = ("process", "measure")
# A test module that calls one of these starts a server of its own.
_SERVER_STARTERS = ("start_redis(", "RedisServer(", "SentinelGroup(", "LocalCluster(")
# Tests in the other tiers that start one indirectly, through a benchmark's main
# or script. A path here that no longer exists stops the collection (a moved file
# must be named again); a test missing here fails `make test-fast`, which finds no
# redis-server. Empty since the tier layout: such a test is in tests/measure.
_OWN_SERVER_TESTS: tuple[str, ...] = ()
# The parameter value that puts a test on a real Redis: fixtures parametrized
# with gateway_kinds() (tests/kit/gateway.py's `kind`, the fuzz tests'
# servers) run each test on fakeredis, on a real server, or both.
_REAL_REDIS_PARAM = "real"

GATEWAY_REDIS_ENV = "SLUICE_TEST_GATEWAY_REDIS"
_GATEWAY_KINDS = {"fake": ["fake"], "real": ["real"], "both": ["fake", "real"]}


def gateway_kinds() -> list[str]:
    """The params of every fake-or-real gateway fixture: ``make test`` runs them on
    real Redis only, ``make test-fast`` on fakeredis only, a bare pytest on both."""
    choice = os.environ.get(GATEWAY_REDIS_ENV, "both")
    if choice not in _GATEWAY_KINDS:
        raise pytest.UsageError(f"{GATEWAY_REDIS_ENV}={choice!r}: one of {sorted(_GATEWAY_KINDS)}")
    return _GATEWAY_KINDS[choice]


# Hypothesis budgets, one per tier (`ci`, hypothesis's own default of 100, is what
# most properties ran before). No property sets max_examples itself: one whose
# examples are costly takes a share through budget(); one that needs another
# setting (derandomize, a health check) says why beside it.
HYPOTHESIS_PROFILE_ENV = "SLUICE_HYPOTHESIS_PROFILE"
# too_slow measures data generation against the wall clock: with xdist's workers
# sharing the cores it fails a property for the machine's load, not the code's.
_QUIET = [HealthCheck.too_slow]
settings.register_profile("fast", max_examples=10, deadline=None, suppress_health_check=_QUIET)
settings.register_profile("ci", max_examples=100, deadline=None, suppress_health_check=_QUIET)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, suppress_health_check=_QUIET
)
settings.load_profile(os.environ.get(HYPOTHESIS_PROFILE_ENV, "ci"))


def budget(share: float, **other: Any) -> settings:
    """Settings for a property whose examples cost far more than most (a simulated
    trace, a round of Redis calls): ``share`` of the profile's budget, at least 5,
    so ``thorough`` searches it harder and ``fast`` lightly. Say why beside it."""
    return settings(max_examples=max(5, round(settings.default.max_examples * share)), **other)


# Pyproject's timeout (60 s) is for one test; a `system` test (several processes,
# a model load, a whole stack) gets this instead, unless it names its own.
SYSTEM_TIMEOUT_S = 300


def _give_system_tests_their_timeout(item: pytest.Item) -> None:
    if item.get_closest_marker("system") and not item.get_closest_marker("timeout"):
        item.add_marker(pytest.mark.timeout(SYSTEM_TIMEOUT_S))


def _starts_a_server(path: Path, starts: dict[Path, bool]) -> bool:
    if path not in starts:
        source = path.read_text() if path.suffix == ".py" else ""
        starts[path] = any(s in source for s in _SERVER_STARTERS)
    return starts[path]


def _on_real_redis(item: pytest.Item, rel: str, starts: dict[Path, bool]) -> bool:
    if rel.split("/", 1)[0] in _OWN_SERVER_TIERS:
        return True
    if "redis_server" in getattr(item, "fixturenames", ()):
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    if any(isinstance(v, str) and v == _REAL_REDIS_PARAM for v in params.values()):
        return True
    name = f"{rel}::{getattr(item, 'originalname', item.name)}"
    if rel in _OWN_SERVER_TESTS or name in _OWN_SERVER_TESTS:
        return True
    return _starts_a_server(Path(str(item.path)), starts)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that runs on a real redis-server ``redis``, so that
    ``make test-redis62`` can run them all again on another Redis version and
    ``make test-fast`` (``-m "not redis"``) runs none of them; give each
    ``system`` test its longer timeout. A test under tests/pure that would run on
    a real Redis stops the collection: it belongs in another tier."""
    tests_dir = Path(__file__).resolve().parent
    stale = [t for t in _OWN_SERVER_TESTS if not (tests_dir / t.split("::")[0]).exists()]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py _OWN_SERVER_TESTS names missing {stale}")
    starts: dict[Path, bool] = {}
    misplaced: list[str] = []
    for item in items:
        rel = Path(str(item.path)).resolve().relative_to(tests_dir).as_posix()
        if _on_real_redis(item, rel, starts):
            item.add_marker(pytest.mark.redis)
            if rel.split("/", 1)[0] == PURE_TIER:
                misplaced.append(item.nodeid)
        _give_system_tests_their_timeout(item)
    if misplaced:
        raise pytest.UsageError(
            f"tests/pure runs on no Redis server; move to tests/redis (or process): {misplaced}"
        )


# SLUICE_TEST_REDIS=cluster: the redis_server fixture is a 3-shard Redis Cluster
# (`make test-cluster` runs the protocol suite and an end-to-end run on it).
TOPOLOGY_ENV = "SLUICE_TEST_REDIS"


def on_cluster() -> bool:
    return os.environ.get(TOPOLOGY_ENV, "") == "cluster"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer | LocalCluster]:
    server: RedisServer | LocalCluster = LocalCluster(3).start() if on_cluster() else start_redis()
    yield server
    server.stop()


def flush(server: RedisServer | LocalCluster) -> None:
    nodes = server.nodes if isinstance(server, LocalCluster) else [server]
    for node in nodes:
        r = redis.Redis.from_url(node.url)
        r.flushall()
        r.close()


@pytest.fixture
def redis_url(redis_server: RedisServer | LocalCluster) -> Iterator[str]:
    flush(redis_server)
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
    """A config with one model ``m`` (buckets 32/128/512), overridable per section
    (tests/factories.py's ``sluice_config``)."""
    return sluice_config(dict(model_overrides))


@pytest.fixture
def queue_factory(r: redis.Redis):  # type: ignore[no-untyped-def]
    """``queue_factory(**model_overrides) -> QueueClient`` on a flushed real Redis."""

    def make(**overrides: object) -> QueueClient:
        return QueueClient(r, dict(make_config(**overrides).models))

    return make
