"""What the routes do: estimate, admit, submit, read, wait, cancel.

Routes stay thin; these functions hold the gateway's logic and every Redis call
goes through the state's :class:`gateway.redis_io.RedisGate` (``st.call``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel

from gateway import generate_service
from gateway.admission import (
    Load,
    check_deadline,
    check_workers,
    drain_rate,
    limits_for,
    retry_after_full,
)
from gateway.state import GatewayState
from sluice.config import ModelConfig
from sluice.cost import CostEstimator, Estimate
from sluice.errors import (
    IdempotencyKeyReused,
    InputTooLarge,
    InvalidInput,
    JobNotFound,
    ModelPaused,
    PriorityNotAllowed,
    QueueFull,
    RateLimited,
    SluiceError,
)
from sluice.jobs import JobRecord, NewJob, Owner, Submitted, Webhook

MAX_IDEMPOTENCY_KEY = 200


@dataclass(frozen=True, slots=True)
class Spec:
    """One submission's shared fields (a batch shares them across its inputs)."""

    priority: str = "normal"
    deadline_ms: int | None = None
    metadata: dict[str, Any] | None = None
    idempotency_key: str | None = None
    owner: Owner | None = None  # the caller's API key (None on an open gateway)
    webhook: Webhook | None = None  # checked by gateway.webhooks at submit
    request_hash: str = ""  # request_hash(body) when an Idempotency-Key came with it


def request_hash(body: BaseModel) -> str:
    """A hash of the request as parsed: its type and every field, defaults included,
    keys sorted, so key order, spacing or a default spelt out are the same request."""
    canonical = json.dumps(
        [type(body).__name__, body.model_dump(mode="json")], sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def _check_spec(cfg: ModelConfig, spec: Spec) -> None:
    if spec.deadline_ms is not None and spec.deadline_ms > cfg.queue.max_deadline_ms:
        raise InvalidInput(
            f"deadline_ms: {spec.deadline_ms} is over this model's max_deadline_ms "
            f"({cfg.queue.max_deadline_ms})"
        )
    owner = spec.owner
    if owner is not None and not owner.allows(spec.priority):
        raise PriorityNotAllowed(
            f"priority {spec.priority!r} is above this API key's max_priority "
            f"({owner.max_priority!r}); ask for {owner.max_priority!r} or lower"
        )
    key = spec.idempotency_key
    if key is not None and not (0 < len(key) <= MAX_IDEMPOTENCY_KEY and key.isprintable()):
        raise InvalidInput(f"Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY} printable characters")


def _check_owner_cap(owner: Owner | None, n: int) -> None:
    """More inputs than the key may ever have unfinished can never be admitted: a
    422, not a 429 whose Retry-After a client would wait out forever."""
    if owner is not None and 0 < owner.max_unfinished < n:
        raise InvalidInput(
            f"inputs: {n} items, this API key may have at most {owner.max_unfinished} "
            "unfinished jobs (max_queued_jobs)"
        )


OFFLOAD_TEXT_CHARS = 16_384  # above this much text the estimate leaves the event loop


def _text_chars(inputs: list[Any]) -> int:
    """Roughly how much text the estimator will read (strings and {"text": ...} only)."""
    n = 0
    for value in inputs:
        if isinstance(value, str):
            n += len(value)
        elif isinstance(value, dict) and isinstance(value.get("text"), str):
            n += len(value["text"])
    return n


def _estimate_each(est: CostEstimator, inputs: list[Any]) -> list[Estimate]:
    out = []
    for i, value in enumerate(inputs):
        try:
            out.append(est.estimate(value))
        except (InvalidInput, InputTooLarge) as e:
            where = f"inputs[{i}]: " if len(inputs) > 1 else "input: "
            raise type(e)(where + str(e)) from e
    return out


async def _estimate_all(st: GatewayState, model: str, inputs: list[Any]) -> list[Estimate]:
    """Estimates in order; a large input is tokenized in a worker thread.

    A tokenizer over a body near max_body_bytes takes long enough to stall every
    other request on the loop; small inputs (the usual case) stay inline, where a
    thread hop would cost more than the estimate.
    """
    est = st.estimators[model]
    try:
        if _text_chars(inputs) > OFFLOAD_TEXT_CHARS:
            return await asyncio.to_thread(_estimate_each, est, inputs)
        return _estimate_each(est, inputs)
    except (InvalidInput, InputTooLarge) as e:
        st.metrics.rejected.labels(model, e.type).inc(len(inputs))
        raise


async def _prepare_generative(
    st: GatewayState, model: str, cfg: ModelConfig, inputs: list[Any]
) -> tuple[list[Any], list[Estimate]]:
    try:
        snap = st.snapshots.current.get(model)
        stats = snap.stats.counters if snap is not None else None
        return await generate_service.prepare(st.codecs, model, cfg, inputs, stats)
    except InvalidInput as e:
        st.metrics.rejected.labels(model, e.type).inc(len(inputs))
        raise


def _admit(st: GatewayState, model: str, cfg: ModelConfig, spec: Spec, cost: int) -> None:
    load = st.snapshots.load(model)
    if load is None:  # no snapshot yet (Redis was down): the submit itself decides
        return
    now = time.time()
    err: SluiceError | None = check_workers(cfg, load, now)
    if err is None:
        err = check_deadline(cfg, load, spec.deadline_ms, cost, now)
    if err is not None:
        st.metrics.rejected.labels(model, getattr(err, "reason", err.type)).inc()
        raise err


def _accepted(model: str, job: NewJob, sub: Submitted, truncated: bool) -> dict[str, Any]:
    return {
        "id": sub.id,
        "status": "queued",
        "model": model,
        "bucket": job.bucket,
        "cost": job.cost,
        "priority": job.priority,
        "truncated": truncated,
    }


def _build_jobs(
    inputs: list[Any], estimates: list[Estimate], spec: Spec, batch: bool
) -> list[NewJob]:
    key = spec.idempotency_key
    return [
        NewJob(
            input=value,
            bucket=e.bucket,
            cost=e.cost,
            priority=spec.priority,
            deadline_ms=spec.deadline_ms,
            metadata=spec.metadata,
            idempotency_key=(f"{key}:{i}" if batch else key) if key else None,
            webhook=spec.webhook,
            request_hash=spec.request_hash if key else "",
        )
        for i, (value, e) in enumerate(zip(inputs, estimates, strict=True))
    ]


async def submit(
    st: GatewayState, model: str, inputs: list[Any], spec: Spec, *, batch: bool = False
) -> tuple[list[dict[str, Any]], bool]:
    """Submit inputs as jobs in one round trip; returns their views and whether all replayed."""
    cfg = st.model(model)
    _check_spec(cfg, spec)
    _check_owner_cap(spec.owner, len(inputs))
    if cfg.generative:  # tokenized and admitted by the model's prompt codec
        inputs, estimates = await _prepare_generative(st, model, cfg, inputs)
    else:
        estimates = await _estimate_all(st, model, inputs)
    total = sum(e.cost for e in estimates)
    _admit(st, model, cfg, spec, total)
    jobs = _build_jobs(inputs, estimates, spec, batch)
    subs = await _enqueue(st, model, cfg, spec, jobs, total)
    replayed = {} if all(s.created for s in subs) else await _read_replays(st, subs, spec.owner)
    if None in replayed.values():
        # A replayed job expired between the submit and the read: its key is free
        # now, so the same submit again makes a new job (the others replay).
        again = await _enqueue(st, model, cfg, spec, jobs, total)
        subs = [Submitted(b.id, a.created or b.created) for a, b in zip(subs, again, strict=True)]
        replayed = await _read_replays(st, subs, spec.owner)
    views = []
    for job, sub, est in zip(jobs, subs, estimates, strict=True):
        view = _accepted(model, job, sub, est.truncated_to is not None)
        rec = replayed.get(sub.id)
        if sub.created:
            st.metrics.count_submitted(model, job.bucket, job.priority)
        elif rec is None:  # gone twice in a row: nothing true to answer with
            raise JobNotFound(f"job {sub.id!r} expired while replaying its idempotency key")
        else:  # a replay answers with the job the key created, as it is now
            view.update(
                status=rec.status.value, bucket=rec.bucket, cost=rec.cost, priority=rec.priority
            )
        views.append(view)
    return views, not any(s.created for s in subs)


async def _enqueue(
    st: GatewayState, model: str, cfg: ModelConfig, spec: Spec, jobs: list[NewJob], total: int
) -> list[Submitted]:
    limits = limits_for(cfg, spec.priority, st.gw.shed_fraction)
    try:
        return await st.submits.submit(  # coalesced with this turn's others (ADR 0161)
            model, jobs, max_jobs=limits.max_jobs, max_cost=limits.max_cost, owner=spec.owner
        )
    except QueueFull as e:
        load = st.snapshots.load(model) or _empty_load()
        rate = drain_rate(cfg, load)
        e.retry_after_s = retry_after_full(
            e, limits, len(jobs), total, rate, spec.owner, cfg.queue.partitions
        )
        st.metrics.rejected.labels(model, e.reason).inc(len(jobs))
        raise
    except (RateLimited, ModelPaused) as e:
        st.metrics.rejected.labels(model, e.type).inc(len(jobs))
        raise
    except IdempotencyKeyReused as e:
        raise IdempotencyKeyReused(
            f"Idempotency-Key {spec.idempotency_key!r} was first used with a different body; "
            "send the same body to replay its job, or a new key for a new request",
            e.index,
        ) from e


async def _read_replays(
    st: GatewayState, subs: list[Submitted], owner: Owner | None
) -> dict[str, JobRecord | None]:
    """The replayed jobs as they are now; None for one whose hash has expired since."""
    out: dict[str, JobRecord | None] = {}
    for sub in subs:
        if not sub.created:
            try:
                out[sub.id] = await get(st, sub.id, owner.name if owner else None)
            except JobNotFound:
                out[sub.id] = None
    return out


def _empty_load() -> Load:
    return Load(0, 0, 0, [], 0.0)


async def get(st: GatewayState, job_id: str, owner: str | None = None) -> JobRecord:
    """The job; with ``owner``, another API key's job is not found (the same 404 as
    an unknown id, so a caller learns nothing about other keys' jobs)."""
    # The record alone first; a job with a webhook is read again with its delivery.
    rec = await st.reads.read(st.queue.ops.get_plain(job_id))
    if rec is None:
        rec = await st.reads.read(st.queue.ops.get(job_id))
    if owner is not None and rec.owner != owner:
        raise JobNotFound(f"job {job_id!r} not found")
    return rec


async def wait(st: GatewayState, job_id: str, wait_s: float, owner: str | None = None) -> JobRecord:
    """The job once it ends, or as it is after ``wait_s`` seconds.

    The waiter is registered before the job is read, so a completion that lands
    between the read and the sleep still wakes it.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(wait_s, st.gw.max_wait_s)
    woke_at: float | None = None
    waiters = st.waiters
    while True:
        fut = waiters.add(job_id)
        try:
            rec = await get(st, job_id, owner)
            left = deadline - loop.time()
            if rec.status.terminal or left <= 0:
                if woke_at is not None and rec.status.terminal:
                    st.metrics.wake.observe(time.perf_counter() - woke_at)
                return rec
            try:
                woke_at = await asyncio.wait_for(fut, left)
            except TimeoutError:
                pass
        finally:
            waiters.drop(job_id, fut)


async def cancel(st: GatewayState, job_id: str, owner: str | None = None) -> str:
    """Cancel a job; returns its status before (JobConflict when it had already ended).
    With ``owner``, another API key's job is not found (checked in the same script)."""
    return await st.call(st.queue.cancel(job_id, owner or ""))


def job_view(rec: JobRecord) -> dict[str, Any]:
    """The job's view for an answer: its result as stored when it may pass through
    (``orjson.Fragment``: not encoded again; gateway.responses.Json writes it)."""
    view = rec.view()
    if rec.result_json is not None:
        view["result"] = orjson.Fragment(rec.result_json)
    return view
