"""The bulk protocol's scripts, declared by :class:`~sluice.signature.Signature`:
named fixed arguments, the groups repeated after them, and the reply."""

from __future__ import annotations

from sluice.signature import Signature

# {status, state} replies: status ok | held | lost | missing | ended | superseded.
LEASE = Signature(
    "lease",
    (
        ("token", "str"),
        ("lease_ms", "num"),
        ("id", "str"),  # the bulk id
        ("mode", "str"),  # take | renew | release
        ("ttl_s", "num"),  # a take restarts the TTL of the bulk job's keys
        ("slice_id", "str"),  # the RQ job id of the slice taking it ('' = any)
    ),
    reply=("status", "state"),
)

FEED = Signature(
    "feed",
    (
        ("token", "str"),
        ("cursor", "str"),  # expected, as stored
        ("new_cursor", "str"),  # after this chunk
        ("n_jobs", "num"),  # the first n_jobs groups are jobs, the rest failed lines
        ("cost", "num"),  # the chunk's estimated cost
    ),
    # A job: its line index and job id; a failed line: its index and output line.
    group=(("index", "str"), ("value", "str")),
)  # replies 'ok' | 'lost' | 'stopped' | 'stale'

GATHER = Signature(
    "gather",
    (("token", "str"), ("jprefix", "str")),
    group=(("index", "str"), ("id", "str"), ("line", "str"), ("ok", "str")),  # ok: '1' | '0'
    reply=("status", "succeeded", "failed"),  # 'lost' alone when the lease is lost
)

FINISH = Signature(
    "finish",
    (
        ("token", "str"),  # '*': the reaper (no lease needed: the last one lapsed)
        ("state", "str"),  # the final state
        ("ttl_s", "num"),
        ("id", "str"),
        ("error_json", "str"),  # JSON ('' = none)
    ),
    reply=("status", "state"),  # ok | lost | missing | refused, and the state before
)

CANCEL = Signature(
    "cancel",
    (("owner", "str"), ("ttl_s", "num"), ("id", "str")),  # owner '' = any
    reply=("status", "state"),  # ok | missing | refused, and the state before
)

SIGNATURES: dict[str, Signature] = {s.script: s for s in (LEASE, FEED, GATHER, FINISH, CANCEL)}
