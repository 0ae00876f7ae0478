"""The operator actions' audit trail (ADR 0151): who did what to which model, and
to how many jobs.

One capped Redis stream (``keys.audit_key()``, fields ``records.AuditField``,
at most about ``records.AUDIT_MAXLEN`` entries), written by :func:`record`
(sync) or :func:`arecord` (async) after an action, and one structured log line
(logger ``sluice.audit``) per action, so the trail survives a lost stream too.
:func:`read` / :func:`aread` give the newest entries first (``sluice admin
audit``, ``GET /v1/admin/audit``).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from sluice import keys
from sluice.records import AUDIT_MAXLEN, AuditField

log = logging.getLogger("sluice.audit")


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One action as read back; ``id`` is the stream entry's id."""

    id: str
    at_ms: int
    actor: str
    action: str
    model: str
    count: int
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fields(
    actor: str, action: str, model: str, count: int, detail: dict[str, Any] | None
) -> dict[str, str]:
    return {
        AuditField.ACTOR: actor,
        AuditField.ACTION: action,
        AuditField.MODEL: model,
        AuditField.COUNT: str(int(count)),
        AuditField.DETAIL: json.dumps(detail or {}, sort_keys=True, default=str),
        AuditField.AT: str(int(time.time() * 1000)),
    }


def _log(fields: dict[str, str]) -> None:
    log.info(
        "audit %s",
        json.dumps({str(k): v for k, v in fields.items() if k != AuditField.DETAIL})
        + f" detail={fields[AuditField.DETAIL]}",
    )


def record(
    redis: Any,
    *,
    actor: str,
    action: str,
    model: str,
    count: int,
    detail: dict[str, Any] | None = None,
) -> None:
    """Append one action to the audit stream (sync Redis client) and log it."""
    fields = _fields(actor, action, model, count, detail)
    _log(fields)
    redis.xadd(keys.audit_key(), fields, maxlen=AUDIT_MAXLEN, approximate=True)


async def arecord(
    redis: Any,
    *,
    actor: str,
    action: str,
    model: str,
    count: int,
    detail: dict[str, Any] | None = None,
) -> None:
    """:func:`record` for an asyncio Redis client."""
    fields = _fields(actor, action, model, count, detail)
    _log(fields)
    await redis.xadd(keys.audit_key(), fields, maxlen=AUDIT_MAXLEN, approximate=True)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def parse(entry_id: Any, raw: dict[Any, Any]) -> AuditEntry:
    """One XRANGE/XREVRANGE entry as an :class:`AuditEntry` (bytes or str replies)."""
    f = {_text(k): _text(v) for k, v in raw.items()}
    try:
        detail = json.loads(f.get(AuditField.DETAIL, "{}") or "{}")
    except ValueError:
        detail = {"raw": f.get(AuditField.DETAIL, "")}
    eid = _text(entry_id)
    at = f.get(AuditField.AT) or eid.split("-")[0]
    return AuditEntry(
        id=eid,
        at_ms=int(at),
        actor=f.get(AuditField.ACTOR, ""),
        action=f.get(AuditField.ACTION, ""),
        model=f.get(AuditField.MODEL, ""),
        count=int(f.get(AuditField.COUNT, "0") or 0),
        detail=detail if isinstance(detail, dict) else {"value": detail},
    )


def _select(entries: list[AuditEntry], model: str | None) -> list[AuditEntry]:
    return [e for e in entries if model is None or e.model == model]


def read(redis: Any, limit: int = 100, model: str | None = None) -> list[AuditEntry]:
    """The newest ``limit`` entries, newest first (optionally one model's, among
    the newest ``limit``)."""
    raw = redis.xrevrange(keys.audit_key(), count=max(1, limit))
    return _select([parse(i, f) for i, f in raw], model)


async def aread(redis: Any, limit: int = 100, model: str | None = None) -> list[AuditEntry]:
    """:func:`read` for an asyncio Redis client."""
    raw = await redis.xrevrange(keys.audit_key(), count=max(1, limit))
    return _select([parse(i, f) for i, f in raw], model)
