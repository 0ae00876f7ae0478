"""Redis commands packed in C: the gateway's connections use ``hiredis.pack_command``.

redis-py's asyncio connection packs every command in Python (an encoder call and a
bytes join per argument); a one-job submit script call has about 38 arguments, and
packing them was the largest single item of a predict's gateway CPU after the
lean routes (ADR 0162): about 76 us against 31 us in C, measured on the same
arguments. hiredis packs str, bytes, int and float exactly as redis-py's encoder
does (UTF-8, ``repr`` of numbers); anything else it refuses with ``TypeError``
(bool, None, bytearray, other objects) goes to redis-py's own packing, which
accepts or refuses it as before. Sync clients (redis-py's own hiredis packer) and
cluster clients are left as they are.
"""

from __future__ import annotations

import functools
from typing import Any

import hiredis  # a dependency of Sluice (pyproject)


def pack(args: tuple[Any, ...]) -> bytes:
    """One command in RESP, as redis-py packs it (a name with spaces is split the same
    way); ``TypeError`` for an argument hiredis does not pack."""
    name = args[0]
    if isinstance(name, str | bytes) and (" " in name if isinstance(name, str) else b" " in name):
        head = tuple(name.encode().split() if isinstance(name, str) else name.split())
        args = head + args[1:]
    return bytes(hiredis.pack_command(args))


@functools.cache
def _packed(cls: type) -> type:
    class Packed(cls):  # type: ignore[valid-type,misc]
        def pack_command(self, *args: Any) -> list[bytes]:
            try:
                return [pack(args)]
            except TypeError:
                return list(super().pack_command(*args))

    Packed.__name__ = Packed.__qualname__ = f"HiredisPacked{cls.__name__}"
    return Packed


def pack_in_c(client: Any) -> Any:
    """``client`` (an asyncio Redis) with its pool's new connections packing in C."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None and hasattr(pool, "connection_class"):
        pool.connection_class = _packed(pool.connection_class)
    return client
