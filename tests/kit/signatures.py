"""Checks of a Lua script against its declared signature, shared by the
signature tests and the webhook claim's."""

from __future__ import annotations

import re

from sluice.signature import Signature


def code(text: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def by_hand(text: str) -> list[str]:
    return re.findall(r"ARGV\[[^\]]*\]", code(text))


def _lists(body: str, pattern: str) -> list[tuple[str, ...]]:
    return [tuple(n.strip() for n in m.split(",")) for m in re.findall(pattern, body)]


def table_free(sig: Signature, body: str) -> tuple[bool, bool, list[str]]:
    """Whether the body reads groups with ``arg_fields`` and replies with ``reply_row``
    (the table-free forms of sluice/signature.py), and every use of them that does not
    list exactly the declared names in declared order."""
    reads = _lists(body, r"local ([\w, ]+?)\s*=\s*arg_fields\(")
    rows = _lists(body, r"reply_row\(\s*\w+\s*,([\w, ]+)\)")
    bad = [f"arg_fields {list(r)}" for r in reads if r != sig.group_names]
    bad += [f"reply_row {list(r)}" for r in rows if r != sig.reply_group]
    if len(reads) != body.count("arg_fields("):
        bad.append("arg_fields not read into a list of locals")
    if len(rows) != body.count("reply_row("):
        bad.append("reply_row not given a list of names")
    return bool(reads), bool(rows), bad


def disagreements(sig: Signature, body: str) -> list[str]:
    """ARGV read by hand, declared names (fixed, group fields, reply) never used, and
    table-free reads or rows that do not list the declared names in order."""
    read_by_hand = by_hand(body)
    fields, rows, bad = table_free(sig, body)
    unused = [n for n in sig.names if not re.search(rf"\b{n}\b", body)]
    if not fields:
        unused += [f"group.{n}" for n in sig.group_names if not re.search(rf"\.{n}\b", body)]
        if sig.group and "arg_group(" not in body:
            unused.append("arg_group")
    unused += [f"reply.{n}" for n in sig.reply if not re.search(rf"\b{n}\s*=", body)]
    if sig.reply and "reply{" not in body:
        unused.append("reply")
    if not rows:
        unused += [
            f"reply_group.{n}" for n in sig.reply_group if not re.search(rf"\b{n}\s*=", body)
        ]
        if sig.reply_group and "reply_group(" not in body:
            unused.append("reply_group")
    return read_by_hand + bad + unused


def sent_scripts() -> dict[str, tuple[str, Signature, str]]:
    """Every script: (its package, its declaration, its source as sent to Redis)."""
    from sluice import registry
    from sluice.admin import ops as admin_ops
    from sluice.admin import signatures as admin
    from sluice.bulk import ops as bulk_ops
    from sluice.bulk import signatures as bulk
    from sluice.generate import ops as generate_ops
    from sluice.generate import signatures as generate
    from sluice.queue import signatures as queue
    from sluice.queue.scripts import script_source
    from sluice.webhooks import ops as webhook_ops
    from sluice.webhooks import signatures as webhooks

    return {
        **{
            f"queue/{n}": ("sluice.queue", s, script_source(n)) for n, s in queue.SIGNATURES.items()
        },
        **{
            f"bulk/{n}": ("sluice.bulk", s, bulk_ops.scripts()[f"bulk_{n}"])
            for n, s in bulk.SIGNATURES.items()
        },
        **{
            f"webhooks/{n}": ("sluice.webhooks", s, webhook_ops.scripts()[f"webhook_{n}"])
            for n, s in webhooks.SIGNATURES.items()
        },
        **{
            f"generate/{n}": ("sluice.generate", s, generate_ops.scripts()[f"generate_{n}"])
            for n, s in generate.SIGNATURES.items()
        },
        **{
            f"admin/{n}": ("sluice.admin", s, admin_ops.scripts()[f"admin_{n}"])
            for n, s in admin.SIGNATURES.items()
        },
        **{
            f"lua/{n}": ("sluice", s, registry.script_source(n))
            for n, s in registry.SIGNATURES.items()
        },
    }
