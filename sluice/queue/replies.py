"""Parsers of the queue scripts' replies that raise or build more than a dict: the
claim's leased jobs and the submit's outcome (its refusals as Sluice errors)."""

from __future__ import annotations

from typing import Any

from sluice import fastjson
from sluice.errors import (
    IdempotencyKeyReused,
    LeaseLost,
    ModelPaused,
    QueueFull,
    RateLimited,
)
from sluice.jobs import ClaimedJob, Submitted
from sluice.queue.signatures import SUBMIT


def claimed_job(j: dict[str, Any]) -> ClaimedJob:
    """One leased job; input that is not JSON marks it malformed instead of losing
    the whole batch (the claim script has vouched for the other fields)."""
    try:
        value, why = fastjson.loads(j["input"]), None
    except (TypeError, ValueError) as e:  # written by something other than submit
        value, why = None, f"stored input is not valid JSON ({e})"
    return ClaimedJob(
        j["id"], value, int(j["cost"]), int(j["attempts"]), int(j["enq"]), malformed=why
    )


def parse_submit(reply: list[Any]) -> list[Submitted]:
    head, jobs = SUBMIT.unpack(reply)
    state, detail = head["state"], head["detail"]
    if state == "paused":
        raise ModelPaused("this model is paused and refuses new jobs until it is resumed")
    if state == "fenced":
        raise LeaseLost("the lease this submit was fenced on is held by another holder")
    if state == "reused":
        i = int(detail) - 1
        raise IdempotencyKeyReused(f"job {i}'s idempotency key made a job from another request", i)
    if state == "limited":
        wait_s = int(detail) / 1000
        raise RateLimited(f"rate limit of this API key exceeded; retry in {wait_s:.2f}s", wait_s)
    queued, cost = int(head["queued"]), int(head["queued_cost"])
    if state == "full" and detail == "owner_jobs":
        raise QueueFull(f"this API key has {queued} unfinished jobs, its limit", detail, queued, 0)
    if state == "full":
        what = "jobs" if detail == "queue_jobs" else "cost"
        raise QueueFull(f"queue is full ({what}: {queued} jobs, cost {cost})", detail, queued, cost)
    return [Submitted(j["id"], bool(int(j["created"]))) for j in jobs]
