"""The named call boundary of a Lua script: one declaration gives both sides.

A :class:`Signature` lists a script's fixed ARGV in order, each with a name and
a kind (``str`` or ``num``). Python packs the values by name
(:meth:`Signature.pack`: a missing or unknown name is an error, never a shifted
argument), and the script gets a generated prologue that reads them into Lua
locals of the same names (:meth:`Signature.lua_prologue`, prepended by
``script_source``), plus ``FIRST_GROUP``, the ARGV index where the repeated
groups start. tests/redis/test_signatures.py checks that a script reads no
declared position by number and uses every declared name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["str", "num"]


@dataclass(frozen=True, slots=True)
class Signature:
    script: str
    argv: tuple[tuple[str, Kind], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.argv)

    @property
    def first_group(self) -> int:
        """ARGV index (1-based) of the first repeated group after the fixed ones."""
        return len(self.argv) + 1

    def pack(self, values: Mapping[str, Any]) -> list[Any]:
        """The fixed ARGV in declared order; every declared name, and only those."""
        missing = [n for n in self.names if n not in values]
        unknown = [n for n in values if n not in self.names]
        if missing or unknown:
            raise ValueError(f"{self.script}: missing {missing}, unknown {unknown}")
        return [values[n] for n in self.names]

    def lua_prologue(self) -> str:
        lines = [f"-- Generated from sluice/queue/signatures.py ({self.script}): ARGV by name."]
        for i, (name, kind) in enumerate(self.argv, start=1):
            value = f"tonumber(ARGV[{i}])" if kind == "num" else f"ARGV[{i}]"
            lines.append(f"local {name} = {value}")
        lines.append(f"local FIRST_GROUP = {self.first_group}")
        return "\n".join(lines) + "\n"


CLAIM = Signature(
    "claim",
    (
        ("jprefix", "str"),  # job key prefix
        ("qprefix", "str"),  # queue key prefix
        ("hprefix", "str"),  # wait-histogram key prefix
        ("channel", "str"),  # done channel
        ("worker", "str"),  # worker id
        ("max_batch", "num"),
        ("max_cost", "num"),  # padded-token budget
        ("lease_ms", "num"),
        ("max_attempts", "num"),
        ("reclaim_limit", "num"),
        ("result_ttl", "num"),  # s
        ("dead_ttl", "num"),  # s
        ("weight_high", "num"),  # priority weights in the response ratio
        ("weight_normal", "num"),
        ("weight_low", "num"),
        ("overdue_factor", "num"),
        ("wake_prefix", "str"),  # wake list key prefix
        ("bulk_max_batch", "num"),  # 0 = take no bulk batch (a worker's prefetch)
        ("bulk_max_cost", "num"),
        ("bulk_reserve", "num"),  # live workers kept free of bulk batches
        ("prio_wait", "num"),  # queue.max_priority_wait_s in ms; 0 = strict priority
    ),
)

SIGNATURES: dict[str, Signature] = {s.script: s for s in (CLAIM,)}
