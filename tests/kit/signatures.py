"""Checks of a Lua script against its declared signature, shared by the
signature tests and the webhook claim's."""

from __future__ import annotations

import re

from sluice.signature import Signature


def code(text: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def by_hand(text: str) -> list[str]:
    return re.findall(r"ARGV\[[^\]]*\]", code(text))


def disagreements(sig: Signature, body: str) -> list[str]:
    """ARGV read by hand, and declared names (fixed, group fields, reply) never used."""
    read_by_hand = by_hand(body)
    unused = [n for n in sig.names if not re.search(rf"\b{n}\b", body)]
    unused += [f"group.{n}" for n in sig.group_names if not re.search(rf"\.{n}\b", body)]
    if sig.group and "arg_group(" not in body:
        unused.append("arg_group")
    unused += [f"reply.{n}" for n in sig.reply if not re.search(rf"\b{n}\s*=", body)]
    if sig.reply and "reply{" not in body:
        unused.append("reply")
    unused += [f"reply_group.{n}" for n in sig.reply_group if not re.search(rf"\b{n}\s*=", body)]
    if sig.reply_group and "reply_group(" not in body:
        unused.append("reply_group")
    return read_by_hand + unused
