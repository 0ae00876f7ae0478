"""Waiting on conditions instead of sleeping: the one way tests synchronise.

A sleep guesses how fast the machine is; on a loaded 2-core CI that guess is
wrong often enough to flake. These helpers poll a predicate and fail only when
it never holds within a generous timeout, i.e. when the run is hung.
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar, overload

import httpx
import redis

from sluice.connection import is_cluster
from tests.kit.http import HTTP

T = TypeVar("T")
# A predicate returns None or False until it holds, then the value waited for: the
# signatures below type that value without them.

HUNG_S = 20.0
"""Default bound: far above any normal latency, so it only fails a hung run."""


def wait_until(
    predicate: Callable[[], T | None | Literal[False]],
    timeout_s: float = HUNG_S,
    what: str = "condition",
    every_s: float = 0.01,
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)


@overload
async def async_wait_until(
    predicate: Callable[[], Awaitable[T | None | Literal[False]]],
    timeout_s: float = ...,
    what: str = ...,
    every_s: float = ...,
) -> T: ...
@overload
async def async_wait_until(
    predicate: Callable[[], T | None | Literal[False]],
    timeout_s: float = ...,
    what: str = ...,
    every_s: float = ...,
) -> T: ...
async def async_wait_until(
    predicate: Callable[[], Any],
    timeout_s: float = HUNG_S,
    what: str = "condition",
    every_s: float = 0.01,
) -> Any:
    """``wait_until`` inside an event loop: yields to it between polls, so the
    tasks being waited on run. ``predicate`` may be sync or async."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(every_s)


def wait_http(
    url: str,
    proc: subprocess.Popen[Any] | None = None,
    timeout_s: float = HUNG_S,
    status: int = 200,
) -> None:
    """Wait until a GET of ``url`` answers ``status`` (a server starting up); fail at
    once if ``proc``, the server's process, exits first."""

    def answers() -> bool:
        assert proc is None or proc.poll() is None, f"the server for {url} exited"
        try:
            return HTTP.get(url, timeout=1).status_code == status
        except httpx.HTTPError:  # not listening yet
            return False

    wait_until(answers, timeout_s, f"{url} to answer {status}", every_s=0.1)


def redis_now_ms(r: redis.Redis) -> int:
    """The Redis server's clock (what leases and deadlines are measured by), in whole
    ms as the scripts read it (_common.lua's now_ms floors): "now > deadline" here is
    then past it for a script run after, not a fraction of a ms that a script run in
    the same ms reads as equal (a Cluster CI run saw that once)."""
    seconds, micros = r.time()  # type: ignore[misc]
    return int(seconds) * 1000 + int(micros) // 1000


def blocked_clients(r: redis.Redis) -> int:
    """How many connections the Redis behind ``r`` has blocked (in BLPOP etc.) now
    (on a cluster: on all its nodes)."""
    if is_cluster(r):
        infos = r.info("clients", target_nodes="all")  # type: ignore[call-arg]
        return sum(int(i["blocked_clients"]) for i in infos.values())
    return int(r.info("clients")["blocked_clients"])


def wait_blocked(r: redis.Redis, more_than: int, timeout_s: float = HUNG_S) -> None:
    """Wait until Redis holds more than ``more_than`` blocked connections."""
    wait_until(lambda: blocked_clients(r) > more_than, timeout_s, "a client blocked in Redis")
