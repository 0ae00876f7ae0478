"""gateway.packing packs every command byte for byte as redis-py's asyncio
connection does, and leaves what hiredis refuses to redis-py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from gateway.packing import PeekReader, _packed, pack_in_c
from gateway.redis_io import connect

PLAIN = Connection()
FAST = _packed(Connection)()
ARGS = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"])),
    st.binary(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
)
NAMES = st.sampled_from(["EVALSHA", "SET", "CONFIG GET", b"SCRIPT LOAD", "x  y"])


def _bytes(parts: list[Any]) -> bytes:
    return b"".join(bytes(p) for p in parts)


@given(NAMES, st.lists(ARGS, max_size=40))
def test_packs_as_redis_py_does(name: str | bytes, args: list[Any]) -> None:
    assert _bytes(FAST.pack_command(name, *args)) == _bytes(PLAIN.pack_command(name, *args))


@pytest.mark.parametrize("odd", [True, None, object()])
def test_what_redis_py_refuses_is_still_refused(odd: Any) -> None:
    with pytest.raises(DataError):
        FAST.pack_command("SET", "k", odd)


def test_what_only_redis_py_packs_is_packed_by_it() -> None:
    assert _bytes(FAST.pack_command("SET", bytearray(b"v"))) == b"*2\r\n$3\r\nSET\r\n$1\r\nv\r\n"


def test_the_gateways_clients_pack_in_c() -> None:
    client = connect("redis://127.0.0.1:1/0", 1.0)
    assert client.connection_pool.connection_class.__name__ == "HiredisPackedConnection"
    assert pack_in_c(object()) is not None  # a client without a pool is left alone


def _reader() -> Any:
    import hiredis
    from redis._parsers.hiredis import NOT_ENOUGH_DATA

    return PeekReader(hiredis.Reader(notEnoughData=NOT_ENOUGH_DATA), NOT_ENOUGH_DATA)


def test_a_reply_is_kept_only_once_whole_and_answered_first() -> None:
    peek = _reader()
    peek.feed(b"*2\r\n$1\r\na\r\n")
    assert not peek.ready(True)  # half a reply: the read arms its timer
    peek.feed(b"$1\r\nb\r\n:7\r\n")
    assert peek.ready(True) and peek.ready(True)  # kept, not taken twice
    assert peek.has_data()  # a connection holding a kept reply is not clean
    assert peek.gets() == [b"a", b"b"]
    assert peek.gets() == 7
    assert not peek.ready(True) and not peek.has_data()


def test_a_protocol_error_is_raised_by_the_read_itself() -> None:
    peek = _reader()
    peek.feed(b"?junk\r\n")
    assert peek.ready(True)  # an error to raise is a whole answer too
    with pytest.raises(Exception, match="Protocol error"):
        peek.gets()
