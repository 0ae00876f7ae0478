"""What the routes do: estimate, admit, submit, read, wait, cancel.

Routes stay thin; these functions hold the gateway's logic and every Redis call
goes through the state's :class:`gateway.redis_io.RedisGate` (``st.call``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

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
from sluice.cost import Estimate
from sluice.errors import InputTooLarge, InvalidInput, QueueFull, SluiceError
from sluice.jobs import JobRecord, NewJob, Submitted

MAX_IDEMPOTENCY_KEY = 200


@dataclass(frozen=True, slots=True)
class Spec:
    """One submission's shared fields (a batch shares them across its inputs)."""

    priority: str = "normal"
    deadline_ms: int | None = None
    metadata: dict[str, Any] | None = None
    idempotency_key: str | None = None


def _check_spec(cfg: ModelConfig, spec: Spec) -> None:
    if spec.deadline_ms is not None and spec.deadline_ms > cfg.queue.max_deadline_ms:
        raise InvalidInput(
            f"deadline_ms: {spec.deadline_ms} is over this model's max_deadline_ms "
            f"({cfg.queue.max_deadline_ms})"
        )
    key = spec.idempotency_key
    if key is not None and not (0 < len(key) <= MAX_IDEMPOTENCY_KEY and key.isprintable()):
        raise InvalidInput(f"Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY} printable characters")


def _estimate_all(st: GatewayState, model: str, inputs: list[Any]) -> list[Estimate]:
    est = st.estimators[model]
    out = []
    for i, value in enumerate(inputs):
        try:
            out.append(est.estimate(value))
        except (InvalidInput, InputTooLarge) as e:
            st.metrics.rejected.labels(model, e.type).inc(len(inputs))
            where = f"inputs[{i}]: " if len(inputs) > 1 else "input: "
            raise type(e)(where + str(e)) from e
    return out


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
        "id": sub.id, "status": "queued", "model": model, "bucket": job.bucket,
        "cost": job.cost, "priority": job.priority, "truncated": truncated,
    }  # fmt: skip


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
        )  # fmt: skip
        for i, (value, e) in enumerate(zip(inputs, estimates, strict=True))
    ]


async def submit(
    st: GatewayState, model: str, inputs: list[Any], spec: Spec, *, batch: bool = False
) -> tuple[list[dict[str, Any]], bool]:
    """Submit inputs as jobs in one round trip; returns their views and whether all replayed."""
    cfg = st.model(model)
    _check_spec(cfg, spec)
    estimates = _estimate_all(st, model, inputs)
    total = sum(e.cost for e in estimates)
    _admit(st, model, cfg, spec, total)
    jobs = _build_jobs(inputs, estimates, spec, batch)
    limits = limits_for(cfg, spec.priority, st.gw.shed_fraction)
    try:
        subs = await st.call(
            st.queue.submit(model, jobs, max_jobs=limits.max_jobs, max_cost=limits.max_cost)
        )
    except QueueFull as e:
        load = st.snapshots.load(model) or _empty_load()
        e.retry_after_s = retry_after_full(e, limits, len(jobs), total, drain_rate(cfg, load))
        st.metrics.rejected.labels(model, e.reason).inc(len(jobs))
        raise
    views = []
    for job, sub, est in zip(jobs, subs, estimates, strict=True):
        view = _accepted(model, job, sub, est.truncated_to is not None)
        if sub.created:
            st.metrics.count_submitted(model, job.bucket, job.priority)
        else:  # a replay answers with the job the key created, as it is now
            rec = await get(st, sub.id)
            view.update(status=rec.status.value, bucket=rec.bucket, cost=rec.cost,
                        priority=rec.priority)  # fmt: skip
        views.append(view)
    return views, not any(s.created for s in subs)


def _empty_load() -> Load:
    return Load(0, 0, 0, [], 0.0)


async def get(st: GatewayState, job_id: str) -> JobRecord:
    return await st.call(st.queue.get(job_id))


async def wait(st: GatewayState, job_id: str, wait_s: float) -> JobRecord:
    """The job once it ends, or as it is after ``wait_s`` seconds.

    The waiter is registered before the job is read, so a completion that lands
    between the read and the sleep still wakes it.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(wait_s, st.gw.max_wait_s)
    woke_at: float | None = None
    while True:
        with st.completions.waiter(job_id) as fut:
            rec = await get(st, job_id)
            left = deadline - loop.time()
            if rec.status.terminal or left <= 0:
                if woke_at is not None and rec.status.terminal:
                    st.metrics.wake.observe(time.perf_counter() - woke_at)
                return rec
            try:
                woke_at = await asyncio.wait_for(fut, left)
            except TimeoutError:
                pass


async def cancel(st: GatewayState, job_id: str) -> str:
    """Cancel a job; returns its status before (JobConflict when it had already ended)."""
    return await st.call(st.queue.cancel(job_id))


def job_view(rec: JobRecord) -> dict[str, Any]:
    return {
        "id": rec.id, "model": rec.model, "status": rec.status.value, "bucket": rec.bucket,
        "cost": rec.cost, "priority": rec.priority, "result": rec.result, "error": rec.error,
        "attempts": rec.attempts, "metadata": rec.metadata, "timings": rec.timings,
    }  # fmt: skip
