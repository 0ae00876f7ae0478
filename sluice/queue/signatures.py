"""The named call boundary of a Lua script: one declaration gives both sides.

A :class:`Signature` lists a script's fixed ARGV in order (each with a name and a
kind, ``str`` or ``num``), the fields of the groups repeated after them (one per
job, per outcome, per served queue), and the fields of its reply. Python packs
arguments by name (:meth:`Signature.pack`: a missing or unknown name is an error,
never a shifted argument) and reads replies by name (:meth:`Signature.unpack`).
The script gets a generated prologue (:meth:`Signature.lua_prologue`, prepended
by ``script_source``) that reads the fixed ARGV into Lua locals of the same names,
``arg_group(i)`` that returns the i-th group as a table of named fields,
``N_GROUPS``, and ``reply{...}`` / ``reply_group(out, {...})`` that build the
reply in declared order. A script body never indexes ARGV itself:
tests/unit/test_signatures.py checks that, and that every declared name is used.
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

    def lua_prologue(self) -> str:
        lines = [f"-- Generated from sluice/queue/signatures.py ({self.script}): ARGV by name."]
        for i, (name, kind) in enumerate(self.argv, start=1):
            lines.append(f"local {name} = {_read(kind, str(i))}")
        lines.append(f"local FIRST_GROUP = {self.first_group}")
        if self.group:
            size = len(self.group)
            lines.append(f"local N_GROUPS = math.floor((#ARGV - FIRST_GROUP + 1) / {size})")
            fields = ", ".join(
                f"{name} = {_read(kind, f'b + {k}' if k else 'b')}"
                for k, (name, kind) in enumerate(self.group)
            )
            lines.append("local function arg_group(i)")
            lines.append(f"  local b = FIRST_GROUP + (i - 1) * {size}")
            lines.append(f"  return {{{fields}}}")
            lines.append("end")
        if self.reply:
            head = ", ".join(f"r.{name}" for name in self.reply)
            index = ", ".join(f"{name} = {i}" for i, name in enumerate(self.reply, start=1))
            lines.append(f"local function reply(r) return {{{head}}} end")
            lines.append(f"local REPLY = {{{index}}}")
        if self.reply_group:
            lines.append("local function reply_group(out, g)")
            lines += [f"  table.insert(out, g.{name})" for name in self.reply_group]
            lines.append("end")
        return "\n".join(lines) + "\n"


def _read(kind: Kind, index: str) -> str:
    return f"tonumber(ARGV[{index}])" if kind == "num" else f"ARGV[{index}]"


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


SUBMIT = Signature(
    "submit",
    (
        ("jprefix", "str"),  # job key prefix
        ("qprefix", "str"),  # queue key prefix
        ("iprefix", "str"),  # idempotency key prefix
        ("max_jobs", "num"),  # max queued jobs (0 = no limit)
        ("max_cost", "num"),  # max queued cost (0 = no limit)
        ("idem_ttl", "num"),  # idempotency TTL s
        ("wprefix", "str"),  # wake list prefix
        ("owner", "str"),  # API key name ('' = none)
        ("owner_max", "num"),  # owner's max unfinished jobs (0 = no limit)
        ("rate", "num"),  # owner's rate limit, jobs/s (0 = none)
        ("burst", "num"),  # owner's burst (jobs)
        ("fence_token", "str"),  # '' = none; else the lease token KEYS[5] must hold
        ("hook_ttl", "num"),  # s a webhook delivery record lives (its retry horizon + a day)
    ),
    group=(
        ("id", "str"),
        ("bucket", "str"),
        ("cost", "num"),
        ("prio", "num"),  # priority rank (3 = bulk item)
        ("input", "str"),  # JSON
        ("meta", "str"),  # JSON or ''
        ("deadline", "num"),  # ms after enqueue (0 = none)
        ("idem", "str"),  # owner-scoped idempotency key or ''
        ("whu", "str"),  # webhook url ('' = none)
        ("whe", "str"),  # the webhook's events, comma-separated
        ("rqh", "str"),  # hash of the request body ('' = none): a replay must match it
    ),
    # 'ok' with now | 'full' with the reason and what is queued | 'limited' with ms to
    # wait | 'fenced' (the fence key holds another token: nothing written) | 'reused'
    # with the 1-based job whose idempotency key made a job from another request
    reply=("state", "detail", "queued", "queued_cost"),
    reply_group=("id", "created"),  # 'ok' only: each job, 1 if this call created it
)

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
        ("nprefix", "str"),  # webhook deliveries and event stream prefix
    ),
    group=(("bucket", "str"), ("service_ms", "num")),  # per served queue, as KEYS[7..]
    reply=("bucket", "now", "expired", "reclaimed"),
    reply_group=("id", "input", "cost", "attempts", "enq"),
)

COMPLETE = Signature(
    "complete",
    (
        ("jprefix", "str"),
        ("qprefix", "str"),
        ("channel", "str"),  # done channel
        ("result_ttl", "num"),  # s
        ("dead_ttl", "num"),  # s
        ("max_attempts", "num"),
        ("reporter", "str"),  # reporting worker id ('' = any)
        ("wprefix", "str"),  # wake list prefix
        ("eprefix", "str"),  # end-to-end histogram prefix
        ("nprefix", "str"),  # webhook deliveries and event stream prefix
    ),
    group=(
        ("id", "str"),
        ("kind", "str"),  # 'ok' | 'retry' | 'fail' | 'release'
        ("payload", "str"),  # result or error JSON
        ("run_ms", "str"),  # stored as sent
    ),
    reply=("accepted", "stale"),
)

RENEW = Signature(
    "renew",
    (("jprefix", "str"), ("worker", "str"), ("lease_ms", "num")),
    group=(("id", "str"),),
    reply_group=("lost",),  # the ids whose lease was lost
)

RECLAIM = Signature(
    "reclaim",
    (
        ("jprefix", "str"),
        ("qprefix", "str"),
        ("channel", "str"),
        ("limit", "num"),
        ("max_attempts", "num"),
        ("dead_ttl", "num"),  # s
        ("wprefix", "str"),
        ("nprefix", "str"),  # webhook deliveries and event stream prefix
    ),
    reply=("reclaimed",),
)

CANCEL = Signature(
    "cancel",
    (
        ("qprefix", "str"),
        ("channel", "str"),
        ("id", "str"),
        ("result_ttl", "num"),  # s
        ("owner", "str"),  # the caller's API key name ('' = any)
        ("jprefix", "str"),
        ("nprefix", "str"),  # webhook deliveries and event stream prefix
    ),
    reply=("outcome", "status"),  # 'cancelled' previous | 'refused' status | 'missing' ''
)

SIGNATURES: dict[str, Signature] = {
    s.script: s for s in (SUBMIT, CLAIM, COMPLETE, RENEW, RECLAIM, CANCEL)
}
