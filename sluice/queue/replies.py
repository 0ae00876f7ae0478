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
    SluiceError,
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
    """A one-request submit's jobs, or its refusal raised."""
    [outcome] = parse_submits(reply)
    if isinstance(outcome, SluiceError):
        raise outcome
    return outcome


def parse_submits(reply: list[Any]) -> list[list[Submitted] | SluiceError]:
    """Each request's outcome, in order: its jobs, or its refusal (not raised)."""
    _, requests = SUBMIT.unpack(reply)
    return [_request_outcome(r) for r in requests]


def _request_outcome(head: dict[str, Any]) -> list[Submitted] | SluiceError:
    state, detail = head["state"], head["detail"]
    if state == "paused":
        return ModelPaused("this model is paused and refuses new jobs until it is resumed")
    if state == "fenced":
        return LeaseLost("the lease this submit was fenced on is held by another holder")
    if state == "reused":
        i = int(detail) - 1
        return IdempotencyKeyReused(f"job {i}'s idempotency key made a job from another request", i)
    if state == "limited":
        wait_s = int(detail) / 1000
        return RateLimited(f"rate limit of this API key exceeded; retry in {wait_s:.2f}s", wait_s)
    queued, cost = int(head["queued"]), int(head["queued_cost"])
    if state == "full" and detail == "owner_jobs":
        return QueueFull(f"this API key has {queued} unfinished jobs, its limit", detail, queued, 0)
    if state == "full":
        what = "jobs" if detail == "queue_jobs" else "cost"
        return QueueFull(
            f"queue is full ({what}: {queued} jobs, cost {cost})", detail, queued, cost
        )
    flat = head["jobs"]
    return [Submitted(flat[i], bool(int(flat[i + 1]))) for i in range(0, len(flat), 2)]
