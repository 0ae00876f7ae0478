"""The gateway's Redis connections: commands packed in C, replies already here read
without a timer.

Packing: the gateway's connections use ``hiredis.pack_command``.

redis-py's asyncio connection packs every command in Python (an encoder call and a
bytes join per argument); a one-job submit script call has about 38 arguments, and
packing them was the largest single item of a predict's gateway CPU after the
lean routes (ADR 0162): about 76 us against 31 us in C, measured on the same
arguments. hiredis packs str, bytes, int and float exactly as redis-py's encoder
does (UTF-8, ``repr`` of numbers); anything else it refuses with ``TypeError``
(bool, None, bytearray, other objects) goes to redis-py's own packing, which
accepts or refuses it as before. Sync clients (redis-py's own hiredis packer) and
cluster clients are left as they are.

Reading: redis-py arms an ``asyncio.timeout`` (``socket_timeout``) around every
reply it reads, a timer armed and cancelled each time (about 6-13 us on this
machine), even when the reply is already in the connection's buffer: the second
and later replies of a pipeline (the gateway's reads, ``gateway/read_batch.py``)
nearly always are. :class:`PeekReader` takes the next reply from hiredis's reader
before the read; when one is there, the read goes without a timer (nothing is
waited for, so no timeout can fire) and gets exactly that reply; when none is,
the read arms its timer as before. Errors the reader raises are raised by the
read itself, where redis-py handles them as before.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import hiredis  # a dependency of Sluice (pyproject)

_NOTHING = object()


def pack(args: tuple[Any, ...]) -> bytes:
    """One command in RESP, as redis-py packs it (a name with spaces is split the same
    way); ``TypeError`` for an argument hiredis does not pack."""
    name = args[0]
    if isinstance(name, str | bytes) and (" " in name if isinstance(name, str) else b" " in name):
        head = tuple(name.encode().split() if isinstance(name, str) else name.split())
        args = head + args[1:]
    return bytes(hiredis.pack_command(args))


class PeekReader:
    """A hiredis ``Reader`` that can take the next reply ahead of ``gets`` and keep
    it: ``gets`` then answers it first (or raises what taking it raised)."""

    __slots__ = ("reader", "kept", "not_enough")

    def __init__(self, reader: Any, not_enough: Any) -> None:
        self.reader = reader
        self.kept: Any = _NOTHING
        self.not_enough = not_enough  # the reader's "no whole reply yet" marker

    def ready(self, decode: bool) -> bool:
        """Whether a whole reply is here (taken and kept, or an error kept)."""
        if self.kept is _NOTHING:
            try:
                got = self.reader.gets() if decode else self.reader.gets(False)
            except Exception as e:  # noqa: BLE001 - the read raises it, as it would have
                got = _Raise(e)
            if got is self.not_enough:
                return False
            self.kept = got
        return True

    def gets(self, *args: Any) -> Any:
        kept = self.kept
        if kept is _NOTHING:
            return self.reader.gets(*args)
        self.kept = _NOTHING
        if type(kept) is _Raise:
            raise kept.error
        return kept

    def has_data(self) -> bool:
        return self.kept is not _NOTHING or bool(self.reader.has_data())

    def __getattr__(self, name: str) -> Any:  # feed, len, set_encoding, ...
        return getattr(self.reader, name)


class _Raise:
    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


def _peek_reader(parser: Any) -> PeekReader | None:
    """The parser's reader as a PeekReader (wrapped once per connect), or None for
    a parser that is not hiredis's."""
    reader = getattr(parser, "_reader", None)
    if type(reader) is PeekReader:
        return reader
    if not isinstance(reader, hiredis.Reader):
        return None
    from redis._parsers.hiredis import NOT_ENOUGH_DATA

    parser._reader = peek = PeekReader(reader, NOT_ENOUGH_DATA)
    return peek


@functools.cache
def _packed(cls: type) -> type:
    class Packed(cls):  # type: ignore[valid-type,misc]
        def pack_command(self, *args: Any) -> list[bytes]:
            try:
                return [pack(args)]
            except TypeError:
                return list(super().pack_command(*args))

        async def read_response(
            self,
            disable_decoding: bool = False,
            timeout: float | None = None,
            *,
            disconnect_on_error: bool = True,
            push_request: bool | None = False,
        ) -> Any:
            if timeout is None and self.socket_timeout is not None:
                peek = _peek_reader(self._parser)
                if peek is not None and peek.ready(not disable_decoding):
                    timeout = math.inf  # redis-py: read with no timer (nothing to wait for)
            return await super().read_response(
                disable_decoding,
                timeout,
                disconnect_on_error=disconnect_on_error,
                push_request=push_request,
            )

    Packed.__name__ = Packed.__qualname__ = f"HiredisPacked{cls.__name__}"
    return Packed


def pack_in_c(client: Any) -> Any:
    """``client`` (an asyncio Redis) with its pool's new connections packing in C."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None and hasattr(pool, "connection_class"):
        pool.connection_class = _packed(pool.connection_class)
    return client
