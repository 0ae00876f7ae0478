"""Dead letters and queue purges: the operator actions' Redis work (docs/adr/0153).

Each action is a *plan*: a generator that yields :class:`~sluice.queue.scripts.Call`
objects and gets each one's parsed reply back, so one definition serves the sync
client (:func:`drive`) and the async one (:func:`adrive`). Large actions go in
chunks of :data:`CHUNK` ids a script call, so Redis is never held for long: reads
first (which ids), then one short script per chunk that checks each job again
before it acts (a job redriven, claimed or ended in between is left alone).

A client runs the scripts after ``client.register(scripts())``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any, TypeVar

from sluice import keys, lua_loader
from sluice.admin.signatures import DEAD_LETTERS, QUEUE_PURGE, SIGNATURES
from sluice.config import ModelConfig
from sluice.errors import InvalidInput, JobConflict, JobNotFound
from sluice.jobs import JobRecord, model_of, priority_rank
from sluice.queue.partitions import split_by_partition
from sluice.queue.scripts import Call
from sluice.records import RANKS, SCORE_SCALE
from sluice.records import JobField as J

CHUNK = 500  # ids (or queue entries) per script call
T = TypeVar("T")
Plan = Generator[Call[Any], Any, T]


@cache
def _sources() -> dict[str, str]:
    return {f"admin_{n}": lua_loader.source("sluice.admin", n, s) for n, s in SIGNATURES.items()}


def scripts() -> dict[str, str]:
    """The operator actions' scripts by call name, for ``client.register``."""
    return dict(_sources())


def drive(plan: Plan[T], run: Callable[[Call[Any]], Any]) -> T:
    """Run a plan with a sync ``run`` (``QueueClient.run``)."""
    try:
        call = next(plan)
        while True:
            call = plan.send(run(call))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def adrive(plan: Plan[T], run: Callable[[Call[Any]], Awaitable[Any]]) -> T:
    """Run a plan with an async ``run`` (``AsyncQueueClient.run``, maybe time-limited)."""
    try:
        call = next(plan)
        while True:
            call = plan.send(await run(call))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead letter and why it failed."""

    id: str
    model: str
    bucket: str
    priority: str
    owner: str | None
    attempts: int
    error: dict[str, Any] | None
    last_worker: str | None
    enqueued_at_ms: int
    started_at_ms: int | None
    failed_at_ms: int | None
    run_ms: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    items: list[DeadLetter]
    total: int  # dead letters listed now
    next_cursor: str | None  # None: the last page


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    """Which dead letters an action takes (every field set must match; none: all)."""

    error_type: str | None = None
    last_worker: str | None = None
    bucket: str | None = None
    priority: str | None = None
    owner: str | None = None
    failed_after_ms: int | None = None
    failed_before_ms: int | None = None

    def matches(self, d: DeadLetter) -> bool:
        fin = d.failed_at_ms or 0
        return (
            (self.error_type is None or (d.error or {}).get("type") == self.error_type)
            and (self.last_worker is None or d.last_worker == self.last_worker)
            and (self.bucket is None or d.bucket == self.bucket)
            and (self.priority is None or d.priority == self.priority)
            and (self.owner is None or d.owner == self.owner)
            and (self.failed_after_ms is None or fin >= self.failed_after_ms)
            and (self.failed_before_ms is None or fin < self.failed_before_ms)
        )


def dead_letter_of(model: str, raw: dict[str, str]) -> DeadLetter | None:
    """A job hash (HGETALL) as a dead letter; None unless it is one (status failed)."""
    if raw.get(J.STATUS) != "failed":
        return None
    rec = JobRecord.from_hash(model, raw)
    return DeadLetter(
        id=rec.id,
        model=model,
        bucket=rec.bucket,
        priority=rec.priority,
        owner=rec.owner,
        attempts=rec.attempts,
        error=rec.error,
        last_worker=raw.get(J.LAST_WORKER),
        enqueued_at_ms=rec.queued_at_ms,
        started_at_ms=rec.started_at_ms,
        failed_at_ms=rec.finished_at_ms,
        run_ms=rec.run_ms,
    )


def _reads(*commands: tuple[Any, ...]) -> Call[list[Any]]:
    return Call(list, commands=commands)


def _records(model: str, ids: Sequence[str]) -> Call[list[dict[str, str]]]:
    return Call(list, commands=[("HGETALL", keys.job_key(model, i)) for i in ids])


def _cursor(cursor: str | None) -> tuple[int, str]:
    if not cursor:
        return 0, ""
    offset, _, last = cursor.partition(":")
    if not offset.isdigit() or not last:
        raise InvalidInput(f"not a dead-letter cursor: {cursor!r}")
    return int(offset), last


def page(
    model: str, limit: int = 50, cursor: str | None = None, span: int = 1
) -> Plan[DeadLetterPage]:
    """Dead letters newest first, ``limit`` a page; ``cursor`` (from the previous page)
    is ``<offset>:<last id>``: the page goes on after that id wherever it is now (new
    failures push the list down), or at the offset once that id has left the list.
    With ``span`` partitions (docs/adr/0159) the lists are paged one after another:
    the last id names its partition, so the cursor keeps its form."""
    offset, last = _cursor(cursor)
    p = keys.partition_of(last) if last else 0
    dead = keys.dead_letter_key(model, p)
    lens = yield _reads(*[("LLEN", keys.dead_letter_key(model, q)) for q in range(span)])
    total = sum(int(n) for n in lens)
    if last:
        (pos,) = yield _reads(("LPOS", dead, last))
        offset = int(pos) + 1 if pos is not None else offset
    ids: list[str] = []
    while True:
        (got,) = yield _reads(("LRANGE", dead, offset, offset + limit - len(ids) - 1))
        ids, end = ids + got, offset + len(got)
        if len(ids) >= limit or p + 1 >= span:
            break
        p, offset, dead = p + 1, 0, keys.dead_letter_key(model, p + 1)
    raws = (yield _records(model, ids)) if ids else []
    items = [d for raw in raws if (d := dead_letter_of(model, raw)) is not None]
    more = bool(ids) and (end < int(lens[p]) or any(int(n) for n in lens[p + 1 :]))
    return DeadLetterPage(items, total, f"{end}:{ids[-1]}" if more else None)


def one(job_id: str, model: str) -> Plan[DeadLetter]:
    """One dead letter (JobNotFound when the job is not one, or not this model's)."""
    if model_of(job_id) != model:
        raise JobNotFound(f"job {job_id!r} not found")
    (raw,) = yield _records(model, [job_id])
    d = dead_letter_of(model, raw) if raw else None
    if d is None:
        raise JobNotFound(f"job {job_id!r} is not a dead letter of {model!r}")
    return d


def select(model: str, where: DeadLetterFilter | None, span: int = 1) -> Plan[list[str]]:
    """The ids listed now (oldest first, partition by partition) that ``where``
    takes; None: all of them."""
    lists = yield _reads(*[("LRANGE", keys.dead_letter_key(model, p), 0, -1) for p in range(span)])
    ids = [i for listed in lists for i in reversed(listed)]
    if where is None or where == DeadLetterFilter():
        return ids
    chosen: list[str] = []
    for i in range(0, len(ids), CHUNK):
        raws = yield _records(model, ids[i : i + CHUNK])
        chosen += [
            d.id
            for raw in raws
            if (d := dead_letter_of(model, raw)) is not None and where.matches(d)
        ]
    return chosen


def _act_call(model: str, action: str, ids: Sequence[str]) -> Call[list[str]]:
    """Ids of one partition (``act`` groups them)."""
    p = keys.partition_of(ids[0]) if ids else 0
    args = DEAD_LETTERS.pack(
        {
            "action": action,
            "jprefix": keys.job_prefix(model, p),
            "qprefix": keys.queue_prefix(model, p),
            "wprefix": keys.wake_prefix(model, p),
            "sprefix": keys.stream_prefix(model, p),
        },
        [{"id": i} for i in ids],
    )
    ks = [keys.dead_letter_key(model, p), keys.stats_key(model, p)]
    ks += [keys.owner_jobs_key(model, p)]
    return Call(
        lambda r: [g["id"] for g in DEAD_LETTERS.unpack(r)[1]], "admin_dead_letters", ks, args
    )


def act(model: str, action: str, ids: Sequence[str]) -> Plan[list[str]]:
    """Redrive (``action="redrive"``) or purge (``"purge"``) these dead letters, a
    chunk a call; the ids acted on (an id no longer a dead letter is skipped)."""
    if action not in ("redrive", "purge"):
        raise ValueError(action)
    done: list[str] = []
    for idx in split_by_partition(ids).values():
        mine = [ids[i] for i in idx]
        for i in range(0, len(mine), CHUNK):
            done += yield _act_call(model, action, mine[i : i + CHUNK])
    return done


def retry(job_id: str, models: dict[str, ModelConfig]) -> Plan[str]:
    """``POST /v1/jobs/{id}/retry``: redrive one failed job (404 unknown, 409 when it
    is not failed); its model."""
    model = model_of(job_id)
    if model is None or model not in models:
        raise JobNotFound(f"job {job_id!r} not found")
    (status,) = yield _reads(("HGET", keys.job_key(model, job_id), J.STATUS))
    if status is None:
        raise JobNotFound(f"job {job_id!r} not found")
    if status != "failed":
        raise JobConflict(f"job {job_id!r} is {status}: only a failed job can be retried", status)
    if not (yield _act_call(model, "redrive", [job_id])):
        raise JobConflict(f"job {job_id!r} was not retried (it changed meanwhile)", status)
    return model


def _purge_call(
    model: str, cfg: ModelConfig, mode: str, queue: str, *, lo: str = "0", hi: str = "0",
    offset: int = 0, bucket: str = "", prio: int = -1, p: int = 0,
) -> Call[tuple[int, int, int]]:  # fmt: skip
    args = QUEUE_PURGE.pack(
        {
            "mode": mode,
            "jprefix": keys.job_prefix(model, p),
            "channel": keys.done_channel(model),
            "nprefix": keys.notify_prefix(model, p),
            "result_ttl": cfg.queue.result_ttl_s,
            "lo": lo,
            "hi": hi,
            "offset": offset,
            "limit": CHUNK,
            "bucket": bucket,
            "prio": prio,
        }
    )
    ks = [keys.stats_key(model, p), keys.owner_jobs_key(model, p), keys.retry_key(model, p), queue]

    def parse(r: list[Any]) -> tuple[int, int, int]:
        head, _ = QUEUE_PURGE.unpack(r)
        return int(head["scanned"]), int(head["acted"]), int(head["removed"])

    return Call(parse, "admin_queue_purge", ks, args)


def purge_queue(
    model: str,
    cfg: ModelConfig,
    priority: str | None = None,
    bucket: str | None = None,
    span: int = 1,
) -> Plan[int]:
    """Cancel the model's queued jobs (one priority class and/or bucket, or all), those
    waiting out a retry backoff included; jobs submitted after it began are kept.
    How many were cancelled (over ``span`` partitions, docs/adr/0159)."""
    if bucket is not None and bucket not in cfg.bucket_names:
        raise InvalidInput(f"unknown bucket {bucket!r}: {', '.join(cfg.bucket_names)}")
    if priority is not None and priority not in RANKS:
        raise InvalidInput(f"unknown priority {priority!r}: {', '.join(RANKS)}")
    total = 0
    for p in range(span):
        total += yield from _purge_partition(model, cfg, priority, bucket, p)
    return total


def _purge_partition(
    model: str, cfg: ModelConfig, priority: str | None, bucket: str | None, p: int
) -> Plan[int]:
    (seq,) = yield _reads(("GET", keys.seq_key(model, p)))
    upto = int(seq or 0)
    ranks = [priority_rank(priority)] if priority else range(len(RANKS))
    total = 0
    for b in [bucket] if bucket else cfg.bucket_names:
        q = keys.queue_key(model, b, p)
        for rank in ranks:
            lo, hi = str(rank * SCORE_SCALE), str(rank * SCORE_SCALE + upto)
            while True:
                scanned, acted, _ = yield _purge_call(model, cfg, "queue", q, lo=lo, hi=hi, p=p)
                total += acted
                if scanned < CHUNK:
                    break
    prio = priority_rank(priority) if priority else -1
    offset, any_q = 0, keys.queue_key(model, cfg.bucket_names[0], p)
    while True:
        scanned, acted, removed = yield _purge_call(
            model, cfg, "retry", any_q, offset=offset, bucket=bucket or "", prio=prio, p=p
        )
        total += acted
        if scanned < CHUNK:
            return total
        offset += scanned - removed
