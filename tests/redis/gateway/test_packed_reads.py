"""The gateway's connections (gateway.packing) read a pipeline's replies as redis-py
does, and a reply that is not there yet still times out."""

from __future__ import annotations

import pytest
import redis.exceptions

from gateway.packing import PeekReader
from gateway.redis_io import connect


async def test_a_pipelines_replies_come_back_in_order_and_a_slow_one_times_out(
    redis_url: str,
) -> None:
    client = connect(redis_url, 0.3)
    try:
        pipe = client.pipeline(transaction=False)
        for i in range(50):
            pipe.set(f"k{i}", i)
            pipe.get(f"k{i}")
        pipe.hget("no-such-hash", "f")
        pipe.incr("k0")
        got = await pipe.execute()
        assert got[:100] == [x for i in range(50) for x in (True, str(i))]
        assert got[100:] == [None, 1]
        conn = await client.connection_pool.get_connection()
        try:
            assert type(conn._parser._reader) is PeekReader  # the fast path was taken
        finally:
            await client.connection_pool.release(conn)
        with pytest.raises(redis.exceptions.ResponseError):
            await client.lpush("k1", "x")  # an error reply: raised as before
        with pytest.raises(redis.exceptions.TimeoutError):
            await client.blpop(["empty"], timeout=2)  # the server answers in 2 s: too late
    finally:
        await client.aclose()
