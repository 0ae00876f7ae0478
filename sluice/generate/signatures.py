"""The generative step script's call boundary (ADR 0146), declared like the
queue's (:mod:`sluice.queue.signatures`): named ARGV, one group per stream write,
the reply by name."""

from __future__ import annotations

from sluice.signature import Signature

STEP = Signature(
    "step",
    (
        ("jprefix", "str"),  # job key prefix
        ("sprefix", "str"),  # token stream key prefix
        ("tprefix", "str"),  # time-to-first-token histogram prefix
        ("worker", "str"),  # the stepping worker's id
        ("lease_ms", "num"),  # a held job's lease runs this long from now
        ("maxlen", "num"),  # XADD MAXLEN ~ (generate.stream_maxlen)
        ("result_ttl", "num"),  # s: the stream expires with the result
        ("dead_ttl", "num"),  # s: a job failed here (run time) as a dead letter
        ("max_run_ms", "num"),  # limits.max_run_ms (0 = none)
        ("channel", "str"),  # done channel (jobs this step ends over a limit)
        ("nprefix", "str"),  # webhook deliveries and event stream prefix
    ),
    group=(
        ("id", "str"),
        ("att", "num"),  # the attempt the worker runs
        ("kind", "str"),  # 'tokens' (an Append) | 'end' (a result) | 'error'
        ("start", "num"),  # 1: the run's first write (START, or RESTART after attempt 1)
        ("idx", "num"),  # tokens: output offset of the first id
        ("ids", "str"),  # tokens: JSON array of ids ('[]' none)
        ("text", "str"),  # tokens: the text they add
        ("payload", "str"),  # end: the result JSON; error: the error text
        ("ntok", "num"),  # end: output tokens of the result (the learned length); tokens: #ids
    ),
    reply=("now",),
    reply_group=("lost",),  # ids of 'tokens' groups whose job is no longer this run's
)

SIGNATURES: dict[str, Signature] = {STEP.script: STEP}
