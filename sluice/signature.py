"""The named call boundary of a Lua script: one declaration gives both sides.

Every script has one (the queue's: ``sluice/queue/signatures.py``; the others
beside the calls that run them); ``sluice.lua_loader`` prepends its prologue.

A :class:`Signature` lists a script's fixed ARGV in order (each with a name and a
kind, ``str`` or ``num``), the fields of the groups repeated after them (one per
job, per outcome, per served queue), and the fields of its reply. Python packs
arguments by name (:meth:`Signature.pack`: a missing or unknown name is an error,
never a shifted argument) and reads replies by name (:meth:`Signature.unpack`).
The script gets a generated prologue (:meth:`Signature.lua_prologue`, prepended
by ``sluice.lua_loader.source``) that reads the fixed ARGV into Lua locals of the
same names, ``arg_group(i)`` that returns the i-th group as a table of named
fields, ``N_GROUPS``, and ``reply{...}`` / ``reply_group(out, {...})`` that build
the reply in declared order. A script body never indexes ARGV itself:
tests/pure/core/test_signatures.py checks that for every script, and that every
declared name is used.

For the per-job loops of the hot scripts, two table-free forms (a table per job
costs thousands of instructions to build and collect, ADR 0177): ``arg_fields(i)``
returns the i-th group's fields as values in declared order, read only as
``local <every field name, in order> = arg_fields(i)``; ``reply_row(out, <every
reply_group name, in order>)`` appends one group. The checker accepts them only
when the names listed are exactly the declared ones in order, so a field can no
more be shifted than with the named forms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["str", "num"]
Fields = tuple[tuple[str, Kind], ...]


@dataclass(frozen=True, slots=True)
class Signature:
    script: str
    argv: Fields
    group: Fields = ()  # repeated after the fixed ARGV, in this order
    reply: tuple[str, ...] = ()  # the reply's fixed head
    reply_group: tuple[str, ...] = ()  # repeated after the head
    # Fixed `num` arguments parsed by arithmetic (one strtod; tonumber runs two, ADR
    # 0177): for a script whose callers always send numbers, as a wrong one then fails
    # the script at once instead of reading as nil.
    parse_strict: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.argv)

    @property
    def group_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.group)

    @property
    def first_group(self) -> int:
        """ARGV index (1-based) of the first repeated group after the fixed ones."""
        return len(self.argv) + 1

    def pack(
        self, values: Mapping[str, Any], groups: Sequence[Mapping[str, Any]] = ()
    ) -> list[Any]:
        """The ARGV: the fixed values in declared order (every declared name, and
        only those), then each group's fields in declared order."""
        out = _ordered(f"{self.script}", self.names, values)
        for g in groups:
            out += _ordered(f"{self.script} group", self.group_names, g)
        return out

    def unpack(self, reply: Sequence[Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The reply's head and its groups, by declared name."""
        head, rest = len(self.reply), list(reply[len(self.reply) :])
        size = len(self.reply_group)
        if len(reply) < head or (rest and (not size or len(rest) % size)):
            raise ValueError(f"{self.script}: a reply of {len(reply)} items does not fit {self}")
        groups = [
            dict(zip(self.reply_group, rest[i : i + size], strict=True))
            for i in range(0, len(rest), size or 1)
        ]
        return dict(zip(self.reply, reply[:head], strict=True)), groups

    def lua_prologue(self, body: str = "") -> str:
        lines = [f"-- Generated from the Signature of {self.script}: ARGV by name."]
        for i, (name, kind) in enumerate(self.argv, start=1):
            lines.append(f"local {name} = {_read(kind, str(i), self.parse_strict)}")
        lines.append(f"local FIRST_GROUP = {self.first_group}")
        if self.group:
            size = len(self.group)
            lines.append(f"local N_GROUPS = math.floor((#ARGV - FIRST_GROUP + 1) / {size})")
            fields = ", ".join(
                f"{name} = {_read(kind, f'b + {k}' if k else 'b')}"
                for k, (name, kind) in enumerate(self.group)
            )
            if not body or "arg_group(" in body:
                lines.append("local function arg_group(i)")
                lines.append(f"  local b = FIRST_GROUP + (i - 1) * {size}")
                lines.append(f"  return {{{fields}}}")
                lines.append("end")
        if self.reply:
            head = ", ".join(f"r.{name}" for name in self.reply)
            index = ", ".join(f"{name} = {i}" for i, name in enumerate(self.reply, start=1))
            lines.append(f"local function reply(r) return {{{head}}} end")
            lines.append(f"local REPLY = {{{index}}}")
        if self.reply_group and (not body or "reply_group(" in body):
            # Appended by index, not table.insert: once per job in the hot scripts.
            lines.append("local function reply_group(out, g)")
            lines.append("  local n = #out")
            lines += [f"  out[n + {k}] = g.{name}" for k, name in enumerate(self.reply_group, 1)]
            lines.append("end")
        # The table-free forms (module docstring) last. With the script's ``body``, only
        # the forms it names: a function made on every call costs even when never called.
        if self.group and "arg_fields(" in body:
            size = len(self.group)
            values = ", ".join(
                _read(kind, f"b + {k}" if k else "b") for k, (_, kind) in enumerate(self.group)
            )
            lines.append("local function arg_fields(i)")
            lines.append(f"  local b = FIRST_GROUP + (i - 1) * {size}")
            lines.append(f"  return {values}")
            lines.append("end")
        if self.reply_group and "reply_row(" in body:
            lines.append(f"local function reply_row(out, {', '.join(self.reply_group)})")
            lines.append("  local n = #out")
            lines += [f"  out[n + {k}] = {name}" for k, name in enumerate(self.reply_group, 1)]
            lines.append("end")
        return "\n".join(lines) + "\n"


def _read(kind: Kind, index: str, strict: bool = False) -> str:
    # A '0' (most limits and switches: off) is read without tonumber: Lua parses a
    # number with strtod, over a thousand instructions per argument per call (ADR 0177).
    if kind == "num":
        number = f"ARGV[{index}] + 0" if strict else f"tonumber(ARGV[{index}])"
        return f"ARGV[{index}] == '0' and 0 or {number}"
    return f"ARGV[{index}]"


def _ordered(what: str, names: tuple[str, ...], values: Mapping[str, Any]) -> list[Any]:
    # Hot path (once per job at submit): as many values as names, all found, means
    # no unknown name either; only a mismatch pays for the full comparison.
    if len(values) == len(names):
        try:
            return [values[n] for n in names]
        except KeyError:
            pass
    missing = [n for n in names if n not in values]
    unknown = [n for n in values if n not in names]
    raise ValueError(f"{what}: missing {missing}, unknown {unknown}")
