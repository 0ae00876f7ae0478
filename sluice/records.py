"""What Sluice stores in Redis beyond the key names: the layouts, in one place.

``sluice.keys`` names every key; this module owns what the values look like
where more than one program reads or writes them:

- **queue score**: an entry of a bucket's queue sorted set scores
  ``priority rank x SCORE_SCALE + arrival sequence``, so one range per class
  holds that class in arrival order. Only ``sluice.queue`` builds or reads
  scores (``QueueOps.class_heads`` gives the counts the autoscaler needs).
- **wait histogram**: the claim script adds each claimed job's queue wait to a
  hash per ``WAIT_WINDOW_S`` window (field = bucket upper bound in ms, or
  ``inf``, plus ``count``), kept ``WAIT_HIST_TTL_S``; ``sluice.waits`` reads it.
  The complete script keeps the end-to-end latency histogram in the same layout,
  and the generative step script the time to first token (``keys.ttft_hist_key``).
- **stats hash** (``keys.stats_key``): the counters the scripts keep per model
  (:class:`Stat`), plus each bucket's queued cost under :func:`bucket_cost_field`.
  Scripts write them; the CLI, the gateway and the autoscaler read them.
- **job hash** (``keys.job_key``), **delivery record** (``keys.delivery_key``),
  **bulk record** (``keys.bulk_key``): their field names (:class:`JobField`,
  :class:`DeliveryField`, :class:`BulkField`), written by the scripts as
  ``JOB.<name>``, ``DELIVERY.<name>``, ``BULK.<name>``: a misspelt one raises in
  the script instead of reading as empty. ``HOOK_TTL_S``: a delivery record's TTL
  when the job holds none of its own.
- **token stream** (``keys.stream_key``, a generative job's Redis Stream): each
  entry's fields (:class:`StreamField`) and what it says (:class:`StreamEvent`),
  ``STREAM.<name>`` and ``STREAM_EVENT.<name>`` in the scripts (ADR 0144).
- **audit stream** (``keys.audit_key``): one entry per operator action,
  :class:`AuditField`, capped at :data:`AUDIT_MAXLEN` (``sluice.audit``).
- **priority rank** (:data:`RANKS`): a job's class in its queue score, 0 high ..
  2 low, 3 bulk items; ``RANK.<class>`` in the scripts.
- **decision record** (``keys.scale_state_key`` hash, ``keys.decisions_key``
  log): what the autoscaler writes each period and the dashboard shows
  (:class:`DecisionRecord`).
- **pause record** (``keys.paused_key``): a paused model's hash
  (:class:`PauseField`, ``PAUSE.<name>`` in the scripts); its existence is the
  pause (claim.lua), ``refuse`` makes submit.lua refuse new jobs (ADR 0154).
- **renew reply** (``why`` per id not renewed): :data:`LEASE_LOST` (it may run
  elsewhere: keep going), else why the job ended under its worker: its terminal
  status, or :data:`RUN_TIME_EXCEEDED` (stop computing it; ADR 0154).
- **pool history** (``keys.pool_history_key``): ``warm_pool.size: auto``'s minutes
  (:class:`PoolMinute`, JSON members scored by their start), ADR 0156.

The Lua scripts get these values from :func:`lua_constants`, prepended to every
script by ``sluice.lua_loader.source``: no script spells them out.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Any

SCORE_SCALE = 10**12  # a priority rank's share of the queue score (seq < 1e12)
# The priority classes by rank (the queue score's first part): bulk items, below low,
# never share a batch with an interactive job (ADR 0090).
RANKS: tuple[str, ...] = ("high", "normal", "low", "bulk")
LOW_RANK = RANKS.index("low")
BULK_RANK = RANKS.index("bulk")
HOOK_TTL_S = 2 * 86400  # webhooks.record_ttl_s's default: the retry horizon and a day

WAIT_WINDOW_S = 10  # one histogram hash per window of this length
WAIT_HIST_TTL_S = 3600  # each window's hash expires this long after its first write
WAIT_BOUNDS_MS: tuple[int, ...] = (
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1000,
    2500,
    5000,
    10000,
    30000,
    60000,
)
WAIT_OVER_LABEL = "inf"  # the field of waits above every bound
WAIT_COUNT_FIELD = "count"  # the window's total
WAIT_LABELS: tuple[str, ...] = (*(str(b) for b in WAIT_BOUNDS_MS), WAIT_OVER_LABEL)


class Stat(StrEnum):
    """Fields of the stats hash: totals since the queue began (``queued_cost`` is
    what is queued now). The Lua scripts write them as ``STAT.<value>``."""

    ARRIVED = "arrived"  # jobs submitted (submit)
    ARRIVED_COST = "arrived_cost"
    BULK_ARRIVED_COST = "bulk_arrived_cost"  # of which bulk items (ADR 0090)
    SUCCEEDED = "succeeded"  # complete
    COMPLETED_COST = "completed_cost"
    FAILED = "failed"  # dead-lettered: complete, reclaim, claim's malformed records
    RETRIED = "retried"
    REDRIVEN = "redriven"  # dead letters put back in their queue (an operator, ADR 0153)
    EXPIRED = "expired"  # past the deadline while queued (claim)
    CANCELLED = "cancelled"
    QUEUED_COST = "queued_cost"  # a level, not a total: every bucket's queued cost
    # Generative models (the step script, ADR 0146): jobs whose end entry was written
    # and the output tokens they made; their ratio is the learned expected output.
    GEN_FINISHED = "gen_finished"
    GEN_OUTPUT_TOKENS = "gen_output_tokens"


class JobField(StrEnum):
    """Fields of a job's hash (``keys.job_key``); the scripts write ``JOB.<value>``."""

    ID = "id"
    STATUS = "status"  # queued | running | succeeded | failed | expired | cancelled
    BUCKET = "bucket"
    COST = "cost"
    PRIO = "prio"  # its rank (RANKS)
    SCORE = "score"  # its queue score, kept for a requeue in its place
    INPUT = "input"  # JSON
    META = "meta"  # JSON
    ENQ = "enq"  # ms: queued, started, finished (server clock)
    START = "start"
    FIN = "fin"
    DL = "dl"  # deadline, ms after enq
    ATT = "att"  # attempts
    WORKER = "worker"  # the lease's holder
    # the worker that held the job's latest attempt that ended without a result (a
    # retry: its claims leave the job's last attempt to another serving worker, ADR
    # 0166; a dead letter: the worker that held its last attempt)
    LAST_WORKER = "lw"
    # ms: the claim of the worker in LAST_WORKER first left the job's last attempt to
    # another worker; a lease's time later that worker takes it after all (ADR 0166)
    LEFT_AT = "lft"
    RETRY_AT = "rat"  # ms: a backed-off retry becomes claimable (retry zset, ADR 0153)
    RESULT = "result"
    ERROR = "error"
    RUN_MS = "run_ms"
    OWNER = "owner"  # API key name
    IDEM = "idem"  # owner-scoped idempotency key
    RQH = "rqh"  # hash of the request body
    WHU = "whu"  # webhook url, events, delivery TTL s
    WHE = "whe"
    WHT = "wht"
    TTFT = "ttft"  # generative: ms from enq to the first output token (the first run's)
    # generative: "<attempt>:<position>" of the last stream write (step.lua): that
    # attempt's START/RESTART is written, and its tokens entries up to the position
    # (sluice.generate.stream.entry_position), so a step re-sent after a lost reply
    # writes nothing twice (ADR 0146)
    GEN_NEXT = "gnx"


class PauseField(StrEnum):
    """Fields of a paused model's hash (``keys.paused_key``), ``PAUSE.<value>``."""

    AT = "at"  # epoch ms: when it was (last) paused, the pausing gateway's clock
    BY = "by"  # who paused it (the admin key's name)
    REFUSE = "refuse"  # "1": submits are refused while paused, "0": accepted and held


# The renew reply's ``why`` of an id it did not renew: the lease was lost (requeued or
# taken by another worker: its result still counts), else the job ended (its terminal
# status, or RUN_TIME_EXCEEDED: failed for running past limits.max_run_ms).
LEASE_LOST = "lost"
RUN_TIME_EXCEEDED = "run_time_exceeded"  # also the error type of such a failure


class DeliveryField(StrEnum):
    """Fields of a webhook delivery's record (``keys.delivery_key``), ``DELIVERY.<value>``."""

    KIND = "kind"  # job | bulk
    EVENT = "event"
    URL = "url"
    OWNER = "owner"
    STATE = "state"  # pending | delivered | dead
    ENDED = "ended"  # ms: the job ended
    FIRST = "first"  # ms: this round of attempts began
    ATT = "att"  # attempts, failed ones, client errors among them
    FAILS = "fails"
    CERR = "cerr"
    LEASE = "lease"  # the attempt's lease token
    NEXT = "next"  # ms: the retry is due
    DONE = "done"  # ms: delivered or given up
    LOG = "log"  # JSON: the latest attempts
    LAST_STATUS = "last_status"
    LAST_ERROR = "last_error"
    LAST_AT = "last_at"
    JTTL = "jttl"  # the job record's own TTL, applied again when the delivery ends
    BODY = "body"  # kept by a notifier before the delivery kept none; deleted on end


class BulkField(StrEnum):
    """Fields of a bulk job's hash (``keys.bulk_key``), ``BULK.<value>``."""

    ID = "id"
    STATE = "state"  # queued | running | cancelling | completed | cancelled | failed
    TOTAL = "total"
    CURSOR = "cursor"  # lines fed
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CREATED = "created"  # ms
    STARTED = "started"
    FINISHED = "finished"
    OWNER = "owner"
    RATE = "rate"  # lines/s, a coordinator's report
    RQ_JOB = "rq_job"  # the RQ job id of the slice that may take the lease
    SLICES = "slices"
    FED_COST = "fed_cost"
    FED_JOBS = "fed_jobs"
    RESUMES = "resumes"
    ERROR = "error"  # JSON
    TOKEN = "token"  # the coordinator lease's holder and its end (ms)
    LEASE = "lease"
    WHU = "whu"  # webhook url, events, delivery TTL s
    WHE = "whe"
    WHT = "wht"


class AuditField(StrEnum):
    """Fields of one entry of the operator actions' audit stream (``keys.audit_key``,
    ``sluice.audit``, ADR 0151); the entry's Redis id says when."""

    ACTOR = "actor"  # the API key's name ("" on an open gateway)
    ACTION = "action"  # e.g. dead_letters.redrive, queue.purge, pause
    MODEL = "model"
    COUNT = "count"  # jobs acted on
    DETAIL = "detail"  # JSON object: the filter, ids, priority, ...
    AT = "at"  # ms, the writer's clock (also in the entry id)


AUDIT_MAXLEN = 10_000  # entries the audit stream keeps (XADD MAXLEN ~)


class StreamField(StrEnum):
    """Fields of one entry of a generative job's token stream (``keys.stream_key``,
    ADR 0144); the scripts write ``STREAM.<value>``. The entry's Redis id is the SSE
    event id a client resumes from (``Last-Event-ID``)."""

    TYPE = "t"  # StreamEvent
    ATTEMPT = "a"  # the run that wrote it (1 first; a restart raises it)
    INDEX = "i"  # tokens: the first token's offset in the output (0-based)
    IDS = "ids"  # tokens: JSON array of token ids
    TEXT = "x"  # tokens: the text these tokens add (incrementally detokenized)
    RESULT = "r"  # end: the job's result JSON (the whole output, usage, finish reason)
    ERROR = "e"  # error: what failed


class StreamEvent(StrEnum):
    """What one stream entry says (``StreamField.TYPE``)."""

    START = "start"  # a run (attempt) began: the first for attempt 1
    RESTART = "restart"  # a later attempt began: its tokens start again at index 0
    TOKENS = "tokens"  # new tokens of the running attempt
    END = "end"  # the job succeeded: the whole output; nothing follows
    ERROR = "error"  # the job failed, expired or was cancelled; nothing follows


# The job counts an operator reads (sluice status's columns, the dashboard's rates).
JOB_COUNTS = (Stat.ARRIVED, Stat.SUCCEEDED, Stat.FAILED, Stat.EXPIRED, Stat.CANCELLED, Stat.RETRIED)

BUCKET_COST_PREFIX = "cost:"  # + bucket name: that bucket's queued cost


def bucket_cost_field(bucket: str) -> str:
    """The stats hash field holding one bucket's queued cost."""
    return BUCKET_COST_PREFIX + bucket


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One autoscaler decision as stored: the fields of the latest-decision hash
    (plus ``period_s`` there) and of each JSON entry of the decision log. None
    (no observation) is stored as "" in the hash and null in the log."""

    at_ms: int
    current: int
    desired: int
    reason: str
    needed: float
    ready: int | None = None
    starting: int | None = None
    queued: int | None = None
    p99_wait_ms: float | None = None
    detail: str = ""  # what a "saturated" decision measured
    # A generative model's inputs (ADR 0149); None for the others.
    slots_busy: int | None = None  # active sequences
    slots_total: int | None = None  # slots of the serving workers (heartbeats)
    ttft_p99_ms: float | None = None  # over the metrics window
    tokens_per_s: float | None = None  # output tokens/s per serving replica, measured
    # warm_pool.size: auto (ADR 0156): the pool's size this period and which bound set it.
    pool: int | None = None
    pool_reason: str = ""

    @property
    def signature(self) -> tuple[int, int, str, int | None]:
        """What makes a decision news for the log: another count, reason or pool size."""
        return self.current, self.desired, self.reason, self.pool

    def fields(self) -> dict[str, Any]:
        return {**asdict(self), "needed": round(self.needed, 2)}


@dataclass(frozen=True, slots=True)
class PoolMinute:
    """One minute of a model's warm-pool history (``size: auto``, docs/adr/0156): the
    largest rise of the need (replicas) within one cold start, the largest of those that
    began from idle, and the serving replicas summed over its periods. Stored as a JSON
    member of ``keys.pool_history_key``'s sorted set, scored by ``start_s`` (wall clock)."""

    start_s: float
    rise: float
    idle_rise: float
    serving_sum: float
    periods: int

    def to_json(self) -> str:
        d = {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}
        return json.dumps(d, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, raw: str | bytes) -> PoolMinute:
        """Raises ValueError on a malformed member (the reader skips it)."""
        try:
            d = json.loads(raw)
            return cls(
                float(d["start_s"]),
                float(d["rise"]),
                float(d["idle_rise"]),
                float(d["serving_sum"]),
                int(d["periods"]),
            )
        except (KeyError, TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"bad pool history entry {raw!r}: {e}") from e


DECISION_PERIOD_FIELD = "period_s"  # the latest-decision hash only: the loop's period
# Every number a reader of the latest-decision hash parses back (the rest is text).
DECISION_NUMBERS = frozenset(
    [
        *(
            f.name
            for f in fields(DecisionRecord)
            if f.name not in ("reason", "detail", "pool_reason")
        ),
        DECISION_PERIOD_FIELD,
    ]
)


def score_range(rank: int) -> tuple[str, str]:
    """ZRANGEBYSCORE/ZCOUNT bounds of one priority class's entries (min, exclusive max)."""
    return f"{rank * SCORE_SCALE}", f"({(rank + 1) * SCORE_SCALE}"


# The field layouts every script gets as a table (``JOB.status``), by table name.
_LUA_FIELD_TABLES: dict[str, type[StrEnum]] = {
    "JOB": JobField,
    "DELIVERY": DeliveryField,
    "BULK": BulkField,
    "PAUSE": PauseField,
    "STREAM": StreamField,
    "STREAM_EVENT": StreamEvent,
}


def lua_constants() -> str:
    """The layouts above as Lua locals, for the start of every script."""
    bounds = ", ".join(str(b) for b in WAIT_BOUNDS_MS)
    stats = ", ".join(f"{s.value} = '{s.value}'" for s in Stat)
    ranks = ", ".join(f"{name} = {rank}" for rank, name in enumerate(RANKS))
    by_text = ", ".join(f"['{rank}'] = {rank}" for rank in range(len(RANKS)))
    return "\n".join(
        (
            "-- Generated from sluice/records.py: edit there, not here.",
            "local function strict(what, t)",
            "  return setmetatable(t, {__index = function(_, k) error(what .. ': no ' .. k) end})",
            "end",
            *(_lua_fields(name, enum) for name, enum in _LUA_FIELD_TABLES.items()),
            f"local RANK = strict('RANK', {{{ranks}}})",
            # a rank as stored (text) -> its number, without strtod (ADR 0177)
            f"local RANK_OF_TEXT = {{{by_text}}}",
            f"local HOOK_TTL_S = {HOOK_TTL_S}",
            f"local SCORE_SCALE = {SCORE_SCALE}",
            f"local WAIT_WINDOW_MS = {WAIT_WINDOW_S * 1000}",
            f"local WAIT_HIST_TTL_S = {WAIT_HIST_TTL_S}",
            f"local WAIT_BOUNDS_MS = {{{bounds}}}",
            f"local WAIT_OVER, WAIT_COUNT = '{WAIT_OVER_LABEL}', '{WAIT_COUNT_FIELD}'",
            f"local STAT = {{{stats}}}",
            f"local STAT_BUCKET_COST = '{BUCKET_COST_PREFIX}'",
            f"local RUN_TIME_EXCEEDED, LEASE_LOST = '{RUN_TIME_EXCEEDED}', '{LEASE_LOST}'",
            "",
        )
    )


def lua_literals() -> dict[str, dict[str, str]]:
    """The generated tables of :func:`lua_constants` whose entries a script's source may
    have replaced by their value (``JOB.status`` by ``'status'``, ``RANK.bulk`` by
    ``3``): table name -> entry -> Lua literal (``sluice.lua_loader``, ADR 0168)."""
    out = {
        name: {f.name.lower(): f"'{f.value}'" for f in enum}
        for name, enum in _LUA_FIELD_TABLES.items()
    }
    out["STAT"] = {s.value: f"'{s.value}'" for s in Stat}
    out["RANK"] = {name: str(rank) for rank, name in enumerate(RANKS)}
    return out


def _lua_fields(name: str, enum: type[StrEnum]) -> str:
    # keyed by the member's name in lower case (``STREAM.type`` for ``t``)
    # (bracketed: ``end`` is a Lua keyword, read as ``STREAM_EVENT['end']``)
    pairs = ", ".join(f"['{f.name.lower()}'] = '{f.value}'" for f in enum)
    return f"local {name} = strict('{name}', {{{pairs}}})"
