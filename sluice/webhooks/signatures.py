"""The webhook delivery scripts, declared by :class:`~sluice.signature.Signature`:
named fixed arguments, repeated groups and the reply."""

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

# claim.lua: by host the notifier has attempts in flight with, how many; per delivery
# leased, its record's fields (sluice/webhooks/ops.py Claimed).
CLAIM = Signature(
    "claim",
    (
        ("nprefix", "str"),  # delivery hash prefix
        ("lease_ms", "num"),
        ("limit", "num"),  # at most this many leased
        ("who", "str"),  # the notifier's id
        ("jprefix", "str"),  # job hash prefix
        ("bprefix", "str"),  # bulk hash prefix
        ("per_host", "num"),  # attempts in flight per host, at most (0: no cap)
        ("scan", "num"),  # due entries looked at, at most
        ("lprefix", "str"),  # a host's lane: this prefix and the host
        ("lanes_max", "num"),  # hosts with a free slot whose lane is walked, at most
    ),
    # By host the notifier has attempts in flight with: how many.
    group=(("host", "str"), ("busy", "num")),
    reply=("now", "more", "laned"),
    reply_group=(
        "id",
        "token",
        "att",
        "fails",
        "cerr",
        "url",
        "event",
        "owner",
        "kind",
        "first",
        "ended",
        "body",
        "host",
        "record",
    ),  # fmt: skip
)
SIGNATURES: dict[str, Signature] = {s.script: s for s in (CLAIM, DONE, REDELIVER)}
