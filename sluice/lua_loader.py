"""The one way a Lua script's source is built: every script goes through here.

A script is sent as: the record layouts of ``sluice/records.py``
(:func:`~sluice.records.lua_constants`), the globals it calls bound to locals
(:data:`GLOBALS_AS_LOCALS`), the shared includes it names (the queue's
``_common.lua``, the bulk helpers ``_bulk.lua``), its call boundary generated from
its :class:`~sluice.queue.signatures.Signature` (ARGV read into named locals, the
reply built by name), any generated constants of its own, then its body. So no
script spells out a field, a rank or a TTL, and none indexes ARGV by hand.
"common" starts with ``_core.lua`` (the slot probe, ``now_ms``, ``int``); a body
with an :data:`INCLUDES_HERE` line gets the rest of its includes there, so the
lines above it (an early exit) run before those helpers are built; helpers no
line of the script names are dropped (:func:`drop_unused`, ADR 0177).
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from importlib import resources

from sluice.records import lua_constants, lua_literals
from sluice.signature import Signature

# Shared helpers a script may include, in the order they are prepended.
INCLUDES: dict[str, tuple[str, str]] = {
    "common": ("sluice.queue", "_common.lua"),  # costs, dead letters, webhooks
    "bulk": ("sluice.bulk", "_bulk.lua"),  # end_bulk (needs "common")
}
# What "common" puts first, before the prologue: the slot probe, now_ms, int.
CORE = ("sluice.queue", "_core.lua")
# A line of a script's body where its includes go instead of before its prologue: the
# lines above it (an early exit) run before the includes' helpers are built (ADR 0177).
INCLUDES_HERE = "-- (the includes go here: sluice.lua_loader)\n"


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
    """A shared include (:data:`INCLUDES`) as written ("common" with :data:`CORE` first,
    as a script gets it)."""
    return (read(*CORE) + "\n" if name == "common" else "") + read(*INCLUDES[name])


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
    inline: bool = True,
) -> str:
    """The source of ``<package>/lua/<name>.lua`` as sent to Redis.

    ``constants``: prepend the record layouts; ``includes``: the shared helpers
    (:data:`INCLUDES`) in order; ``sig``: its generated prologue; ``extra``:
    generated Lua of this script's own, after the prologue. ``strip_comments``:
    without comment lines, for scripts sent with EVAL on every call (ADR 0111).
    ``inline``: the record layouts' entries written as their values
    (:func:`inline_literals`) and unused helpers dropped (:func:`drop_unused`). A
    body with an :data:`INCLUDES_HERE` line gets its includes there, after its
    prologue and the lines above it.
    """
    body = read(package, f"{name}.lua")
    head, here, rest = body.partition(INCLUDES_HERE)
    shared = [read(*INCLUDES[i]) + "\n" for i in includes]
    parts = [_SHARED_BEGIN]  # helpers between the marks: dropped when unused
    parts += [lua_constants()] if constants else []
    parts += [GLOBALS_AS_LOCALS]
    parts += [read(*CORE) + "\n"] if "common" in includes else []
    if here:
        parts += [_SHARED_END, sig.lua_prologue(body) if sig else "", extra, head]
        parts += [_SHARED_BEGIN, *shared, _SHARED_END, rest]
    else:
        parts += [*shared, _SHARED_END, sig.lua_prologue(body) if sig else "", extra, body]
    text = "".join(parts)
    if constants and inline:
        text = inline_literals(text, f"{package}/{name}")
    if inline:  # as sent; else every line as written
        text = drop_unused(text)
    text = text.replace(_SHARED_BEGIN, "").replace(_SHARED_END, "")
    if strip_comments:
        return "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("--"))
    return text


_SHARED_BEGIN, _SHARED_END = "-- (shared helpers)\n", "-- (end of shared helpers)\n"
# A top-level helper of the shared part: a function (to the first `end` in column 0)
# or a one-line local of one name.
_HELPER = re.compile(r"^local function (\w+)\(.*?^end\n|^local (\w+) = [^\n]*\n", re.M | re.S)
# A quoted string (kept whole, so a `--` inside it starts no comment) or a comment.
_STRING_OR_COMMENT = re.compile(r"'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"|--[^\n]*")


def _uncommented(text: str) -> str:
    """``text`` less its comments; strings stay (a name in one still counts as named)."""
    return _STRING_OR_COMMENT.sub(lambda m: "" if m.group(0).startswith("--") else m.group(0), text)


def drop_unused(text: str) -> str:
    """``text`` without the helpers between its shared-part marks (the record layouts
    and the includes) that nothing else in it names. Every
    helper is a closure or a value the script builds on each call before its first
    line runs, whether it calls it or not: a closure costs an allocation and a walk of
    the open upvalues per variable it captures (hundreds of instructions each, ADR
    0177). Dropped until none is left unnamed (a helper only a dropped helper named
    goes too); a name in a comment does not count. The marks are left in place."""
    while True:
        words = Counter(_WORD.findall(_uncommented(text)))
        drop = []
        for begin in re.finditer(re.escape(_SHARED_BEGIN), text):
            end = text.index(_SHARED_END, begin.end())
            for m in _HELPER.finditer(text, begin.end(), end):
                block, name = m.group(0), m.group(1) or m.group(2)
                opened = block.count("{") + block.count("(")
                if m.group(2) and opened != block.count("}") + block.count(")"):
                    continue  # a one-line start of a longer statement: kept
                if m.group(1) and "\nlocal function " in block:
                    continue  # a one-line function ran on into the next one: both kept
                own = _WORD.findall(_uncommented(block)).count(name)
                if words[name] == own:
                    drop.append((m.start(), m.end()))
        if not drop:
            return text
        for start, stop in reversed(drop):
            text = text[:start] + text[stop:]


_ENTRY = re.compile(r"\b(\w+)(?:\.(\w+)\b|\['(\w+)'\])")
_DEFINITION = re.compile(r"^local (\w+) = .*\n", re.M)
_WORD = re.compile(r"\w+")


def inline_literals(text: str, where: str = "script") -> str:
    """``text`` with every entry of a generated table (``JOB.status``, ``STAT.failed``,
    ``RANK.bulk``, ``STREAM_EVENT['end']``) replaced by its value, and the tables no
    longer named dropped from the header: a script then builds none of them on each
    call and looks none up per job (measured: about 15 us of Redis CPU a call on the
    shared machine, ADR 0168). A misspelt entry now fails here, when the source is
    built, instead of when the script runs.
    """
    literals = lua_literals()

    def value(m: re.Match[str]) -> str:
        table, entry = m.group(1), m.group(2) or m.group(3)
        if table not in literals:
            return m.group(0)
        if entry not in literals[table]:
            raise ValueError(f"{where}: {table} has no {entry!r} (sluice/records.py)")
        return literals[table][entry]

    text = _ENTRY.sub(value, text)
    # A table is still named if its name occurs as a word outside its own definition
    # line(s): counted once over the text (a search of the whole text per definition,
    # as before, was most of a process's time building its scripts).
    words = Counter(_WORD.findall(text))

    def unused(m: re.Match[str]) -> str:
        name, line = m.group(1), m.group(0)
        if name not in literals:
            return line
        own = text.count(line) * _WORD.findall(line).count(name)
        return "" if words[name] == own else line

    return _DEFINITION.sub(unused, text)
