"""The one way a Lua script's source is built: every script goes through here.

A script is sent as: the record layouts of ``sluice/records.py``
(:func:`~sluice.records.lua_constants`), the globals it calls bound to locals
(:data:`GLOBALS_AS_LOCALS`), the shared includes it names (the queue's
``_common.lua``, the bulk helpers ``_bulk.lua``), its call boundary generated from
its :class:`~sluice.queue.signatures.Signature` (ARGV read into named locals, the
reply built by name), any generated constants of its own, then its body. So no
script spells out a field, a rank or a TTL, and none indexes ARGV by hand.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from sluice.records import lua_constants
from sluice.signature import Signature

# Shared helpers a script may include, in the order they are prepended.
INCLUDES: dict[str, tuple[str, str]] = {
    "common": ("sluice.queue", "_common.lua"),  # time, costs, dead letters, webhooks
    "bulk": ("sluice.bulk", "_bulk.lua"),  # end_bulk (needs "common")
}


# The globals the scripts call, as locals of the chunk: a script's own functions then
# reach them as upvalues instead of a global lookup each time (Redis 7 guards its
# globals table; measured in docs/benchmarks/cost.md, ADR 0168).
GLOBALS_AS_LOCALS = (
    "local redis, cjson, tonumber, tostring, type, pairs, ipairs, unpack, math, string, table"
    " = redis, cjson, tonumber, tostring, type, pairs, ipairs, unpack, math, string, table\n"
)


@cache
def read(package: str, filename: str) -> str:
    """One Lua file as written (``<package>/lua/<filename>``)."""
    return (resources.files(package) / "lua" / filename).read_text()


def include(name: str) -> str:
    """A shared include (:data:`INCLUDES`) as written."""
    return read(*INCLUDES[name])


@cache
def source(
    package: str,
    name: str,
    sig: Signature | None = None,
    *,
    includes: tuple[str, ...] = ("common",),
    constants: bool = True,
    extra: str = "",
    strip_comments: bool = False,
) -> str:
    """The source of ``<package>/lua/<name>.lua`` as sent to Redis.

    ``constants``: prepend the record layouts; ``includes``: the shared helpers
    (:data:`INCLUDES`) in order; ``sig``: its generated prologue; ``extra``:
    generated Lua of this script's own, after the prologue. ``strip_comments``:
    without comment lines, for scripts sent with EVAL on every call (ADR 0111).
    """
    parts = [lua_constants()] if constants else []
    parts += [GLOBALS_AS_LOCALS]
    parts += [read(*INCLUDES[i]) + "\n" for i in includes]
    parts += [sig.lua_prologue() if sig else "", extra, read(package, f"{name}.lua")]
    text = "".join(parts)
    if strip_comments:
        return "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("--"))
    return text
