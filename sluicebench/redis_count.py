"""Measure Redis traffic: round trips seen by a client, commands seen by the server.

Round trips are counted where they happen, in the connection: redis-py sends a
single command or a whole pipeline with one ``send_packed_command`` call and
then waits for the replies, so one send is one round trip (a NOSCRIPT retry or
a health-check PING counts too, as it should). Commands come from the server's
``INFO commandstats``, which also counts the commands a Lua script runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

# Commands the benchmark itself sends to read or reset the server's counters.
_HARNESS_COMMANDS = frozenset({"info", "config"})


class CountingConnection(redis.Connection):
    """A redis-py connection that counts round trips, per process."""

    round_trips = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.round_trips += 1
        super().send_packed_command(command, check_health)


def reset_round_trips() -> None:
    CountingConnection.round_trips = 0


def counting_client(url: str, *, decode: bool = True, timeout_s: float = 30.0) -> redis.Redis:
    """A client whose round trips are counted (no health-check PINGs to blur them)."""
    pool = redis.ConnectionPool.from_url(
        url,
        connection_class=CountingConnection,
        decode_responses=decode,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
    )
    return redis.Redis(connection_pool=pool)


def reset_commandstats(r: redis.Redis) -> None:
    r.config_resetstat()


@dataclass(frozen=True, slots=True)
class CommandStats:
    """Server-side counts since the last reset: calls and microseconds per command.

    A script's own entry (``evalsha``) times the whole script, inner commands
    included, so its ``usec`` is the server time the script cost.
    """

    calls: dict[str, int]
    usec: dict[str, int]

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


def read_commandstats(r: redis.Redis) -> CommandStats:
    """Counts per command since the last reset, without the harness's own reads."""
    calls: dict[str, int] = {}
    usec: dict[str, int] = {}
    for name, entry in r.info("commandstats").items():
        cmd = str(name).removeprefix("cmdstat_").lower()
        if cmd not in _HARNESS_COMMANDS:
            calls[cmd], usec[cmd] = int(entry["calls"]), int(entry["usec"])
    return CommandStats(calls, usec)
