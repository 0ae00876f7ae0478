"""The operator actions' scripts (sluice/admin/lua), declared by
:class:`~sluice.signature.Signature` (docs/adr/0153)."""

from __future__ import annotations

from sluice.signature import Signature

DEAD_LETTERS = Signature(
    "dead_letters",
    (
        ("action", "str"),  # 'redrive' | 'purge'
        ("jprefix", "str"),
        ("qprefix", "str"),
        ("wprefix", "str"),  # wake list prefix
        ("sprefix", "str"),  # token stream prefix (generative jobs)
    ),
    group=(("id", "str"),),  # one chunk of ids (CHUNK at most)
    reply=("scanned", "acted"),
    reply_group=("id",),  # the ids acted on
)

QUEUE_PURGE = Signature(
    "queue_purge",
    (
        ("mode", "str"),  # 'queue' (KEYS[4] by score) | 'retry' (the retry zset)
        ("jprefix", "str"),
        ("channel", "str"),  # done channel
        ("nprefix", "str"),  # webhook deliveries and event stream prefix
        ("result_ttl", "num"),  # s
        ("lo", "str"),  # 'queue': score bounds (one priority class, up to the start seq)
        ("hi", "str"),
        ("offset", "num"),  # 'retry': where this chunk starts
        ("limit", "num"),  # entries looked at per call
        ("bucket", "str"),  # 'retry': only this bucket's ('' = any)
        ("prio", "num"),  # 'retry': only this rank's (-1 = any)
    ),
    reply=("scanned", "acted", "removed"),
)

SIGNATURES: dict[str, Signature] = {s.script: s for s in (DEAD_LETTERS, QUEUE_PURGE)}
