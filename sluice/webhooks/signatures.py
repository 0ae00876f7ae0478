"""The webhook delivery scripts, declared by :class:`~sluice.signature.Signature`:
named fixed arguments and the reply. (The claim's, ``CLAIM``, sits in
``sluice/webhooks/ops.py`` beside the claim it parses.)"""

from __future__ import annotations

from sluice.signature import Signature

DONE = Signature(
    "done",
    (
        ("id", "str"),
        ("token", "str"),  # the attempt's lease token
        ("outcome", "str"),  # what comes next: 'delivered' | 'retry' | 'dead'
        ("retry_ms", "num"),  # ms until the retry
        ("http_status", "str"),  # stored as sent (0: none: refused, timed out, ...)
        ("failure", "str"),  # what went wrong ('' = nothing)
        ("latency_ms", "num"),  # the attempt's
        ("client_error", "str"),  # '1' when it counts as a client error (a 4xx but 410/429)
        ("delivered_ttl", "num"),  # s a delivered record is kept
        ("dead_ttl", "num"),  # s a given-up one is kept
        ("log_keep", "num"),  # attempts kept in the record's log
    ),
    reply=("status",),  # 'ok' | 'stale'
)

REDELIVER = Signature(
    "redeliver",
    (("id", "str"), ("ttl_s", "num")),  # ttl_s: the record's TTL
    reply=("status", "state"),  # 'ok' with the previous state | 'missing' with ''
)

SIGNATURES: dict[str, Signature] = {s.script: s for s in (DONE, REDELIVER)}
