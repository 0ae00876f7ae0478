"""The job model shared by the gateway, workers and tools."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sluice import fastjson
from sluice.keys import PARTITION_MARK
from sluice.records import RANKS
from sluice.records import DeliveryField as D
from sluice.records import JobField as J


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self not in (JobStatus.QUEUED, JobStatus.RUNNING)


# Bulk items (sluice/bulk) queue in a class of their own below ``low``: never chosen
# while an interactive job heads a served queue, never batched with one (ADR 0090).
BULK = "bulk"
# Bulk ids are "<model>.bulk<hex>" and their items' job ids "<bulk id>-<line>"; an
# interactive job's token is hex only, so it can never hold this mark.
BULK_ID_MARK = ".bulk"


def is_bulk_item(job_id: str) -> bool:
    return BULK_ID_MARK in job_id


def priority_rank(priority: str) -> int:
    """0 for high, 1 for normal, 2 for low, 3 for bulk items."""
    return RANKS.index(priority)


def new_job_id(model: str, partition: int = 0) -> str:
    """An opaque id that still tells the server which model's keys hold the job.

    Model names never contain '.', so the id is ``<model>.<time-ordered token>``; a
    job of partition p >= 1 has ``<p>~`` before its token (``keys.partition_of``).
    """
    mark = f"{partition}{PARTITION_MARK}" if partition else ""
    return f"{model}.{mark}{int(time.time() * 1000):011x}{secrets.token_hex(8)}"


def model_of(job_id: str) -> str | None:
    model, sep, token = job_id.partition(".")
    return model if sep and model and token else None


# What a webhook may be asked to report: a job's terminal statuses.
WEBHOOK_EVENTS: tuple[str, ...] = ("succeeded", "failed", "expired", "cancelled")


# A webhook delivery's hash fields that GET /v1/jobs/{id} shows (sluice/webhooks).
DELIVERY_FIELDS = (D.STATE, D.ATT, D.LAST_STATUS, D.LAST_ERROR, D.LAST_AT, D.NEXT)


def delivery_view(values: list[Any] | None) -> dict[str, Any] | None:
    """``{state, attempts, last_status, ...}`` from an HMGET of DELIVERY_FIELDS."""
    if not values or not values[0]:
        return None
    f = dict(zip(DELIVERY_FIELDS, values, strict=True))

    def num(name: str) -> int | None:
        try:
            return (int(f[name]) or None) if f[name] else None
        except ValueError:
            return None

    last_at, nxt = num(D.LAST_AT), num(D.NEXT)
    return {
        "state": f[D.STATE],
        "attempts": num(D.ATT) or 0,
        "last_status": num(D.LAST_STATUS),
        "last_error": f[D.LAST_ERROR] or None,
        "last_attempt_at": last_at / 1000 if last_at else None,
        "next_attempt_at": nxt / 1000 if nxt else None,
    }


@dataclass(frozen=True, slots=True)
class Webhook:
    """Where to report a job's end (checked by sluice.webhooks.guard at submit)."""

    url: str
    events: tuple[str, ...] = WEBHOOK_EVENTS


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job about to be submitted; ``cost`` and ``bucket`` come from the estimator."""

    input: Any
    bucket: str
    cost: int
    priority: str = "normal"
    deadline_ms: int | None = None
    metadata: dict[str, Any] | None = None
    idempotency_key: str | None = None
    id: str = ""
    webhook: Webhook | None = None
    # A hash of the request that made the job: a replay of its idempotency key with
    # another request is refused (IdempotencyKeyReused); '' = not compared.
    request_hash: str = ""


@dataclass(frozen=True, slots=True)
class Owner:
    """The API key a submit is made under, with its limits (0 = none).

    Its jobs carry its name, count against ``max_unfinished`` until they end, and
    its idempotency keys live in its own namespace.
    """

    name: str
    max_unfinished: int = 0
    rate_per_s: float = 0.0
    burst: int = 0
    max_priority: str | None = None  # the highest priority it may ask for (None = any)

    def allows(self, priority: str) -> bool:
        """Whether this key may submit at ``priority`` (bulk, below low, always)."""
        if self.max_priority is None or priority == BULK:
            return True
        return priority_rank(priority) >= priority_rank(self.max_priority)


@dataclass(frozen=True, slots=True)
class Submitted:
    id: str
    created: bool  # False when an idempotency key replayed an earlier job


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    id: str
    input: Any
    cost: int
    attempts: int
    enqueued_at_ms: int
    malformed: str | None = None  # why the stored job cannot run (its input is not JSON)


@dataclass(frozen=True, slots=True)
class Batch:
    model: str
    bucket: str
    claimed_at_ms: int
    jobs: list[ClaimedJob]
    expired: int = 0
    reclaimed: int = 0

    def __len__(self) -> int:
        return len(self.jobs)

    @property
    def bulk(self) -> bool:
        """A batch of bulk items (the claim script never mixes them with other jobs)."""
        return bool(self.jobs) and is_bulk_item(self.jobs[0].id)

    @property
    def cost(self) -> int:
        return sum(j.cost for j in self.jobs)

    @property
    def padded_cost(self) -> int:
        """What the device computes on (inputs x the widest), what the budget counts."""
        return len(self.jobs) * max((j.cost for j in self.jobs), default=0)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a worker reports for one job: ok (result), retry or fail (error)."""

    id: str
    kind: str
    payload: Any
    run_ms: float = 0.0

    @classmethod
    def ok(cls, job_id: str, result: Any, run_ms: float = 0.0) -> Outcome:
        return cls(job_id, "ok", result, run_ms)

    @classmethod
    def retry(cls, job_id: str, err_type: str, message: str, run_ms: float = 0.0) -> Outcome:
        return cls(job_id, "retry", {"type": err_type, "message": message}, run_ms)

    @classmethod
    def fail(cls, job_id: str, err_type: str, message: str, run_ms: float = 0.0) -> Outcome:
        return cls(job_id, "fail", {"type": err_type, "message": message}, run_ms)

    @classmethod
    def release(cls, job_id: str) -> Outcome:
        """Hand back a job that never ran: requeued in its place, no attempt used."""
        return cls(job_id, "release", None, 0.0)


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job as stored, with timings derived from the server's clock."""

    id: str
    model: str
    bucket: str
    cost: int
    priority: str
    status: JobStatus
    attempts: int
    input: Any
    result: Any
    error: dict[str, Any] | None
    metadata: dict[str, Any] | None
    queued_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    deadline_at_ms: int | None
    run_ms: float | None
    worker: str | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    owner: str | None = None  # the API key name that submitted it (None: open gateway)
    # Its webhook's delivery as GET /v1/jobs/{id} shows it (None: no webhook).
    webhook: dict[str, Any] | None = None
    # ``result`` as stored, when an answer may carry it as it is (fastjson.loads_kept).
    result_json: str | None = field(default=None, compare=False, repr=False)

    def view(self) -> dict[str, Any]:
        """The job as GET /v1/jobs/{id} answers it (and a webhook's body carries it)."""
        out = {
            "id": self.id,
            "model": self.model,
            "status": self.status.value,
            "bucket": self.bucket,
            "cost": self.cost,
            "priority": self.priority,
            "result": self.result,
            "error": self.error,
            "attempts": self.attempts,
            "metadata": self.metadata,
            "timings": self.timings,
        }
        if self.webhook is not None:
            out["webhook"] = self.webhook
        return out

    @classmethod
    def from_hash(
        cls, model: str, raw: dict[str, str], delivery: list[Any] | None = None
    ) -> JobRecord:
        """The record as stored; a field written by something other than the protocol
        (an older gateway, a hand edit) reads as its default, never as an exception.
        ``delivery``: its webhook delivery's DELIVERY_FIELDS, when read with it."""
        status, err = _status(raw)
        queued = _num(raw, J.ENQ) or 0
        started, finished = _num(raw, J.START), _num(raw, J.FIN)
        if status in (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.SUCCEEDED) and err:
            err = None  # an earlier attempt's error; the job is still going or went well
        run_ms = _float(raw, J.RUN_MS)
        result, result_json = _json_kept(raw, J.RESULT)
        return cls(
            id=raw.get(J.ID, ""),
            model=model,
            bucket=raw.get(J.BUCKET, ""),
            cost=_num(raw, J.COST) or 0,
            priority=_priority(raw.get(J.PRIO)),
            status=status,
            attempts=_num(raw, J.ATT) or 0,
            input=_json(raw, J.INPUT),
            result=result,
            error=err,
            metadata=_json(raw, J.META, dict),
            queued_at_ms=queued,
            started_at_ms=started,
            finished_at_ms=finished,
            deadline_at_ms=_num(raw, J.DL),
            run_ms=run_ms,
            worker=raw.get(J.WORKER) or None,  # '' once ended (complete.lua)
            owner=raw.get(J.OWNER) or None,
            webhook=webhook_of(raw, delivery, status.value, status.terminal),
            timings=_timings(raw, queued, started, finished, run_ms),
            result_json=result_json,
        )


def _timings(
    raw: dict[str, str],
    queued: int,
    started: int | None,
    finished: int | None,
    run_ms: float | None,
) -> dict[str, Any]:
    """The view's timings; a generative job's ``ttft_ms`` (enqueue to its first output
    token, written once by the step script) once it has one."""
    out: dict[str, Any] = {
        "queued_at": queued / 1000,
        "started_at": started / 1000 if started else None,
        "finished_at": finished / 1000 if finished else None,
        "queue_wait_ms": (started - queued) if started else None,
        "run_ms": run_ms,
    }
    ttft = raw.get(J.TTFT)
    if ttft is not None and ttft.isdigit():
        out["ttft_ms"] = int(ttft)
    return out


def webhook_of(
    raw: dict[str, str], delivery: list[Any] | None, status: str, terminal: bool
) -> dict[str, Any] | None:
    """A job's (or bulk job's) webhook: where, on what, and its delivery ('waiting'
    until it ends in one of its events; 'not_sent' once it ended in another)."""
    url = raw.get(J.WHU)
    if not url:
        return None
    whe = raw.get(J.WHE)
    events = [e for e in whe.split(",") if e] if whe else list(WEBHOOK_EVENTS)
    out: dict[str, Any] = {"url": url, "events": events}
    d = delivery_view(delivery)
    if d is not None:
        return out | d
    return out | {"state": "not_sent" if terminal and status not in events else "waiting"}


def _num(raw: dict[str, str], name: str) -> int | None:
    """An integer field; absent, zero or not a number is None."""
    try:
        return int(raw[name]) or None
    except (KeyError, ValueError):
        return None


def _float(raw: dict[str, str], name: str) -> float | None:
    try:
        return float(raw[name]) if raw.get(name) else None
    except ValueError:
        return None


def _json_kept(raw: dict[str, str], name: str) -> tuple[Any, str | None]:
    """A JSON field and its text when it may pass through (fastjson.loads_kept)."""
    text = raw.get(name)
    if not text or not isinstance(text, str):
        return _json(raw, name), None
    try:
        return fastjson.loads_kept(text)
    except ValueError:
        return None, None


def _json(raw: dict[str, str], name: str, kind: type | None = None) -> Any:
    """A JSON field; absent, not JSON or not of ``kind`` is None."""
    text = raw.get(name)
    if not text:
        return None
    try:
        value = fastjson.loads(text)
    except ValueError:
        return None
    return value if kind is None or isinstance(value, kind) else None


def _priority(prio: str | None) -> str:
    try:
        return RANKS[int(prio or "1")]
    except (ValueError, IndexError):
        return "normal"


_STATUSES: dict[Any, JobStatus] = {s.value: s for s in JobStatus}  # JobStatus(v), by lookup


def _status(raw: dict[str, str]) -> tuple[JobStatus, dict[str, Any] | None]:
    """The status and error; a status nobody wrote reads as failed, saying why."""
    err = _json(raw, J.ERROR, dict) if raw.get(J.ERROR) else None
    try:
        return _STATUSES[raw.get(J.STATUS, "")], err
    except (KeyError, TypeError):
        what = repr(raw[J.STATUS])[:60] if J.STATUS in raw else "no status"
        message = f"job record unusable: {what} is not a job status"
        return JobStatus.FAILED, {"type": "malformed_job", "message": message}


@dataclass(frozen=True, slots=True)
class BucketStats:
    bucket: str
    queued: int
    queued_cost: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    """A model's queue state, read in one round trip; counters are totals since start."""

    model: str
    buckets: list[BucketStats]
    in_flight: int
    dead_lettered: int
    counters: dict[str, int]
    # Queued jobs waiting out a retry backoff (keys.retry_key): in no bucket's queue
    # yet, but queued (their cost is in the buckets' queued cost already).
    retrying: int = 0

    @property
    def queued(self) -> int:
        return sum(b.queued for b in self.buckets) + self.retrying

    @property
    def queued_cost(self) -> int:
        return sum(b.queued_cost for b in self.buckets)


@dataclass(frozen=True, slots=True)
class ClassHeads:
    """A model's queue by priority class, read with the stats (what the autoscaler needs).

    ``above_low``: high and normal jobs queued; ``bulk_counts``: bulk items per
    bucket (in bucket order); ``heads``: the oldest job id of each interactive
    class in each bucket that has one (bulk waits by design, so it has none).
    """

    above_low: int
    bulk_counts: list[int]
    heads: list[str]
