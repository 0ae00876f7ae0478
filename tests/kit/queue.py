"""Queue-protocol helpers shared by tests: a client that counts its round trips."""

from __future__ import annotations

from typing import Any

import redis


class CountingRedis(redis.Redis):
    """Counts client round trips: single commands and pipeline flushes."""

    trips = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        CountingRedis.trips += 1
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        original = pipe.execute

        def execute(raise_on_error: bool = True) -> Any:
            CountingRedis.trips += 1
            return original(raise_on_error)

        pipe.execute = execute  # type: ignore[method-assign]
        return pipe
