"""The queue protocol's scripts, declared by :class:`~sluice.signature.Signature`:
named fixed arguments, the groups repeated after them, and the reply."""

from __future__ import annotations

from sluice.signature import Signature

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
        # each request's job count, comma-separated: its jobs are the groups in order,
        # and each request is admitted as if sent alone, in this order (ADR 0161)
        ("requests", "str"),
    ),
    group=(
        ("id", "str"),
        ("bucket", "str"),
        ("cost", "str"),  # an integer; kept as sent: the job's hash stores the text
        ("prio", "str"),  # priority rank (3 = bulk item), an integer, stored as sent
        ("input", "str"),  # JSON
        ("meta", "str"),  # JSON or ''
        ("deadline", "str"),  # ms after enqueue, an integer (0 = none)
        ("idem", "str"),  # owner-scoped idempotency key or ''
        ("whu", "str"),  # webhook url ('' = none)
        ("whe", "str"),  # the webhook's events, comma-separated
        ("rqh", "str"),  # hash of the request body ('' = none): a replay must match it
    ),
    # One group per request: 'ok' with now | 'full' with the reason and what is queued
    # | 'limited' with ms to wait | 'fenced' (the fence key holds another token:
    # nothing written) | 'reused' with the request's 1-based job whose idempotency key
    # made a job from another request. ``jobs`` ('ok' only): each job's id and 1 if
    # this call created it, flat (id, created, id, created, ...).
    reply_group=("state", "detail", "queued", "queued_cost", "jobs"),
    parse_strict=True,  # sluice/queue/scripts.py sends numbers only (ADR 0177)
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
        ("reclaim_limit", "str"),  # an integer, only ever sent on to ZRANGEBYSCORE's LIMIT
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
        ("backoff_ms", "num"),  # retry.backoff_ms (0 = requeue at once), ADR 0153
        ("backoff_max_ms", "num"),
        # bulk only while this many other serving workers hold no batch (ADR 0164)
        ("bulk_idle_reserve", "num"),
        ("holding", "num"),  # 1: the worker still runs a batch beside this claim (a prefetch)
    ),
    group=(("bucket", "str"), ("service_ms", "num")),  # per served queue, as KEYS[12..]
    reply=("bucket", "now", "expired", "reclaimed"),
    reply_group=("id", "input", "cost", "attempts", "enq"),
    parse_strict=True,  # sluice/queue/scripts.py sends numbers only (ADR 0177)
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
        ("max_run_ms", "num"),  # limits.max_run_ms (0 = none)
        ("backoff_ms", "num"),  # retry.backoff_ms, ADR 0153
        ("backoff_max_ms", "num"),
    ),
    group=(
        ("id", "str"),
        ("kind", "str"),  # 'ok' | 'retry' | 'fail' | 'release'
        ("payload", "str"),  # result or error JSON
        ("run_ms", "str"),  # stored as sent
    ),
    reply=("accepted", "stale"),
    parse_strict=True,  # sluice/queue/scripts.py sends numbers only (ADR 0177)
)

RENEW = Signature(
    "renew",
    (
        ("jprefix", "str"),
        ("worker", "str"),
        ("lease_ms", "num"),
        ("channel", "str"),  # done channel (jobs this call ends over a limit)
        ("nprefix", "str"),  # webhook deliveries and event stream prefix
        ("result_ttl", "num"),  # s
        ("dead_ttl", "num"),  # s
        ("max_run_ms", "num"),  # limits.max_run_ms (0 = none)
    ),
    group=(("id", "str"),),
    # per id not renewed: 'lost' (records.LEASE_LOST), else how the job ended
    reply_group=("id", "why"),
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
        ("backoff_ms", "num"),  # retry.backoff_ms, ADR 0153
        ("backoff_max_ms", "num"),
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
