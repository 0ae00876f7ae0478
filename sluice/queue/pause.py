"""Pausing a model (docs/adr/0154): the pause record's calls and its reading.

A paused model's record (``keys.paused_key``, fields ``records.PauseField``) lives
in Redis under the model's hash tag, so a gateway, worker or autoscaler restart
finds it. While it exists claim.lua leases nothing (batches in hand finish), and
with ``refuse`` set submit.lua refuses new jobs (``ModelPaused``); the autoscaler
holds its count. A resume deletes it and pushes wake tokens onto every bucket's
wake list, so idle workers claim at once instead of after their idle wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sluice import keys
from sluice.queue.scripts import Call
from sluice.records import PauseField

WAKE_TOKENS = 64  # what a resume pushes per bucket: the wake lists' cap (_common.lua)


@dataclass(frozen=True, slots=True)
class PauseState:
    """Whether a model is paused, since when (epoch ms), by whom, and
    whether it refuses submits meanwhile."""

    paused: bool
    at_ms: int = 0
    by: str = ""
    refuse_submits: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The shape GET /v1/models, ``sluice status`` and the dashboard show."""
        if not self.paused:
            return {"paused": False}
        return {
            "paused": True,
            "at_ms": self.at_ms,
            "by": self.by,
            "refuse_submits": self.refuse_submits,
        }


RUNNING = PauseState(False)


def parse_state(raw: dict[str, str] | None) -> PauseState:
    """A pause record as read by HGETALL (empty or None: the model runs)."""
    if not raw:
        return RUNNING
    try:
        at = int(float(raw.get(PauseField.AT, "0") or 0))
    except ValueError:
        at = 0
    return PauseState(True, at, raw.get(PauseField.BY, ""), raw.get(PauseField.REFUSE, "0") == "1")


def state_call(model: str) -> Call[PauseState]:
    """Read one model's pause state (one HGETALL)."""
    return Call(lambda r: parse_state(r[0]), commands=[("HGETALL", keys.paused_key(model))])


def pause_call(
    model: str, *, by: str, refuse_submits: bool, now_ms: int, partitions: int = 1
) -> Call[bool]:
    """Pause (or re-pause with another ``refuse_submits``); True when it was running.

    One pipeline: EXISTS then HSET, so the reply says whether this call paused it.
    With ``partitions`` (docs/adr/0159), each partition's claims and submits read a
    copy in their own slot: all are written."""
    key = keys.paused_key(model)
    fields = {PauseField.AT: now_ms, PauseField.BY: by, PauseField.REFUSE: int(refuse_submits)}
    flat = [x for kv in fields.items() for x in kv]
    cmds: list[tuple[Any, ...]] = [("EXISTS", key)]
    cmds += [("HSET", keys.paused_key(model, p), *flat) for p in range(partitions)]
    return Call(lambda r: int(r[0]) == 0, commands=cmds)


def resume_call(model: str, buckets: list[str], partitions: int = 1) -> Call[bool]:
    """Resume; True when it was paused. Every bucket's wake list (of every partition)
    gets tokens (capped as the scripts cap them), so workers blocked on it claim now."""
    cmds: list[tuple[Any, ...]] = [("DEL", keys.paused_key(model, p)) for p in range(partitions)]
    for p in range(partitions):
        for b in buckets:
            wake = keys.wake_key(model, b, p)
            cmds += [("LPUSH", wake, *["1"] * WAKE_TOKENS), ("LTRIM", wake, 0, WAKE_TOKENS - 1)]
    return Call(lambda r: int(r[0]) == 1, commands=cmds)
