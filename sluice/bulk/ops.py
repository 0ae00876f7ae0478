"""The bulk protocol's Redis calls, defined once for the sync and async clients.

Like :class:`sluice.queue.scripts.QueueOps`: each operation is a
:class:`~sluice.queue.scripts.Call` (a Lua script from ``sluice/bulk/lua`` or
pipelined commands) with a parser; ``QueueClient.run`` executes it after
``client.register(SCRIPTS)``.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sluice import keys, lua_loader
from sluice.bulk.signatures import CANCEL, FEED, FINISH, GATHER, LEASE, SIGNATURES
from sluice.errors import JobConflict, JobNotFound
from sluice.jobs import BULK_ID_MARK, DELIVERY_FIELDS, Webhook, webhook_of
from sluice.queue.scripts import Call
from sluice.records import HOOK_TTL_S
from sluice.records import BulkField as F
from sluice.signature import Signature

SCRIPT_NAMES = ("lease", "feed", "gather", "finish", "cancel")
# A coordinator reports every poll; a report this old is a dead coordinator's.
BULK_REPORT_MAX_AGE_MS = 60_000
ENDED = frozenset({"completed", "cancelled", "failed"})
PUSH_CHUNK = 1000  # lines per RPUSH
BULK_TOKEN_RE = re.compile(r"bulk[0-9a-f]{1,64}")  # what follows "<model>." in a bulk id
# Under queue.durability: replica, what a client may do when no replica confirmed.
UPLOAD_HINT = "the bulk job may still run; uploading again makes a second one"
CANCEL_HINT = "cancel again (a cancelled bulk job answers 409)"


def scripts() -> dict[str, str]:
    """The bulk scripts by call name, for ``QueueClient.register`` (sluice.lua_loader:
    the record layouts, the queue's and the bulk helpers, each one's prologue)."""
    return {
        f"bulk_{n}": lua_loader.source("sluice.bulk", n, SIGNATURES[n], includes=("common", "bulk"))
        for n in SCRIPT_NAMES
    }


def new_bulk_id(model: str) -> str:
    """``<model>.bulk<time-ordered token>``: the model is found from the id, as for jobs."""
    return f"{model}{BULK_ID_MARK}{int(time.time() * 1000):011x}{secrets.token_hex(6)}"


def item_job_id(bulk_id: str, index: int) -> str:
    """A line's job id, the same every time it is fed: resubmitting it after a crash
    finds the job already there (the submit script's retry rule) instead of a second one."""
    return f"{bulk_id}-{index}"


def parse_report(raw: Any, now_ms: int) -> tuple[float, float] | None:
    """(queued_cost, backlog_cost) of one coordinator's report; None if unreadable or
    older than BULK_REPORT_MAX_AGE_MS by the Redis clock (its coordinator is dead)."""
    try:
        d = json.loads(raw)
        at_ms, queued, backlog = int(d["at_ms"]), float(d["queued_cost"]), float(d["backlog_cost"])
    except (TypeError, ValueError, KeyError, OverflowError):
        return None
    if now_ms - at_ms > BULK_REPORT_MAX_AGE_MS or not math.isfinite(queued + backlog):
        return None
    return max(0.0, queued), max(0.0, backlog)


@dataclass(frozen=True, slots=True)
class BulkState:
    """A bulk job's hash, typed."""

    id: str
    model: str
    state: str
    total: int
    cursor: int
    succeeded: int
    failed: int
    created_ms: int
    started_ms: int | None
    finished_ms: int | None
    owner: str | None
    rate_per_s: float
    rq_job: str | None
    slices: int
    fed_cost: int
    fed_jobs: int
    resumes: int
    error: dict[str, Any] | None
    webhook: dict[str, Any] | None = None  # its webhook and delivery (None: no webhook)

    @property
    def done(self) -> int:
        return self.succeeded + self.failed

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    def view(self) -> dict[str, Any]:
        """What GET /v1/bulk/{id} answers (and a bulk webhook's body carries): state,
        counts, rate and ETA."""
        left = self.total - self.done
        running = self.state in ("running", "queued", "cancelling")
        eta = round(left / self.rate_per_s, 1) if running and self.rate_per_s > 0 else None
        return {
            "id": self.id,
            "model": self.model,
            "state": self.state,
            "counts": {
                "total": self.total,
                "done": self.done,
                "succeeded": self.succeeded,
                "failed": self.failed,
                "remaining": left,
                "fed": self.cursor,
            },
            "rate_per_s": self.rate_per_s if running else None,
            "eta_s": eta,
            "created_at": self.created_ms / 1000,
            "started_at": self.started_ms / 1000 if self.started_ms else None,
            "finished_at": self.finished_ms / 1000 if self.finished_ms else None,
            "error": self.error,
            "output": f"/v1/bulk/{self.id}/output",
        } | ({"webhook": self.webhook} if self.webhook is not None else {})

    @classmethod
    def from_hash(
        cls, bulk_id: str, model: str, raw: dict[str, str], delivery: list[Any] | None = None
    ) -> BulkState:
        def num(name: str) -> int:
            try:
                return int(raw.get(name) or 0)
            except ValueError:
                return 0

        try:
            error = json.loads(raw[F.ERROR]) if raw.get(F.ERROR) else None
        except ValueError:
            error = None
        state = raw.get(F.STATE, "failed")
        return cls(
            id=bulk_id,
            model=model,
            state=state,
            total=num(F.TOTAL),
            cursor=num(F.CURSOR),
            succeeded=num(F.SUCCEEDED),
            failed=num(F.FAILED),
            created_ms=num(F.CREATED),
            started_ms=num(F.STARTED) or None,
            finished_ms=num(F.FINISHED) or None,
            owner=raw.get(F.OWNER) or None,
            rate_per_s=float(raw.get(F.RATE) or 0.0),
            rq_job=raw.get(F.RQ_JOB) or None,
            slices=num(F.SLICES),
            fed_cost=num(F.FED_COST),
            fed_jobs=num(F.FED_JOBS),
            resumes=num(F.RESUMES),
            error=error,
            webhook=webhook_of(raw, delivery, state, state in ENDED),
        )


class BulkOps:
    """Builds the bulk calls; every key comes from :mod:`sluice.keys`."""

    def __init__(self, models: Sequence[str], ttl_s: int) -> None:
        self.models = set(models)
        self.ttl_s = ttl_s

    def model_of(self, bulk_id: str) -> str:
        """The model of an id shaped as :func:`new_bulk_id` makes them; anything else is
        not found. An id is part of its keys' names: ``<id>:in`` would name a bulk
        job's input list and ``<id>:out`` its output hash."""
        model, _, token = bulk_id.partition(".")
        if model not in self.models or not BULK_TOKEN_RE.fullmatch(token):
            raise JobNotFound(f"bulk job {bulk_id!r} not found")
        return model

    def _all_keys(self, model: str, bulk_id: str) -> list[str]:
        return [
            keys.bulk_key(model, bulk_id),
            keys.bulk_active_key(model),
            keys.bulk_backlog_key(model),
            keys.bulk_input_key(model, bulk_id),
            keys.bulk_output_key(model, bulk_id),
            keys.bulk_pending_key(model, bulk_id),
            keys.delivery_key(model, bulk_id),
        ]

    def create(
        self,
        model: str,
        bulk_id: str,
        lines: Sequence[str],
        owner: str | None,
        now_ms: int,
        grace_ms: int,
        webhook: Webhook | None = None,
        hook_ttl_s: int = HOOK_TTL_S,
    ) -> Call[None]:
        """Store the lines, then the bulk job's hash and its active entry (one pipeline).

        The input's TTL comes first, so an upload cut off half way expires.
        """
        inp = keys.bulk_input_key(model, bulk_id)
        cmds: list[tuple[Any, ...]] = [("DEL", inp)]
        for i in range(0, len(lines), PUSH_CHUNK):
            cmds.append(("RPUSH", inp, *lines[i : i + PUSH_CHUNK]))
            if i == 0:
                cmds.append(("EXPIRE", inp, self.ttl_s))
        bk = keys.bulk_key(model, bulk_id)
        fields = {
            F.ID: bulk_id,
            F.STATE: "queued",
            F.TOTAL: len(lines),
            F.CURSOR: 0,
            F.SUCCEEDED: 0,
            F.FAILED: 0,
            F.CREATED: now_ms,
            F.OWNER: owner or "",
        }
        if webhook is not None:  # the finish/cancel script enqueues its delivery
            fields |= {F.WHU: webhook.url, F.WHE: ",".join(webhook.events), F.WHT: hook_ttl_s}
        cmds.append(("HSET", bk, *[x for kv in fields.items() for x in kv]))
        cmds.append(("EXPIRE", bk, self.ttl_s))
        cmds.append(("ZADD", keys.bulk_active_key(model), now_ms + grace_ms, bulk_id))
        return Call(lambda _: None, commands=cmds, durability_of=model, unacked_hint=UPLOAD_HINT)

    def get(self, bulk_id: str, owner: str | None = None) -> Call[BulkState]:
        """With ``owner``, another API key's bulk job is not found (404, as for jobs)."""
        model = self.model_of(bulk_id)

        def parse(r: list[Any]) -> BulkState:
            if not r[0] or (owner is not None and r[0].get("owner", "") != owner):
                raise JobNotFound(f"bulk job {bulk_id!r} not found")
            return BulkState.from_hash(bulk_id, model, r[0], r[1])

        return Call(
            parse,
            commands=[
                ("HGETALL", keys.bulk_key(model, bulk_id)),
                ("HMGET", keys.delivery_key(model, bulk_id), *DELIVERY_FIELDS),
            ],
        )

    def set_fields(self, bulk_id: str, **fields: Any) -> Call[None]:
        bk = keys.bulk_key(self.model_of(bulk_id), bulk_id)
        flat = [x for kv in fields.items() for x in kv]
        return Call(lambda _: None, commands=[("HSET", bk, *flat)])

    def lease(
        self, bulk_id: str, token: str, lease_ms: int, mode: str, slice_id: str = ""
    ) -> Call[tuple[str, str]]:
        model = self.model_of(bulk_id)
        ks = self._all_keys(model, bulk_id)
        ks = [ks[0], ks[1], ks[3], ks[4], ks[5]]
        args = LEASE.pack(
            {
                "token": token,
                "lease_ms": lease_ms,
                "id": bulk_id,
                "mode": mode,
                "ttl_s": self.ttl_s,
                "slice_id": slice_id,
            }
        )
        return Call(_status_state(LEASE), "bulk_lease", ks, args)

    def cancel(self, bulk_id: str, owner: str = "") -> Call[str]:
        model = self.model_of(bulk_id)

        def parse(r: list[str]) -> str:
            head, _ = CANCEL.unpack(r)
            if head["status"] == "missing":
                raise JobNotFound(f"bulk job {bulk_id!r} not found")
            if head["status"] == "refused":
                raise JobConflict(f"bulk job {bulk_id!r} already {head['state']}", head["state"])
            return str(head["state"])

        args = CANCEL.pack({"owner": owner, "ttl_s": self.ttl_s, "id": bulk_id})
        ks = self._all_keys(model, bulk_id)
        return Call(parse, "bulk_cancel", ks, args, durability_of=model, unacked_hint=CANCEL_HINT)

    def finish(
        self, bulk_id: str, token: str, state: str, error: dict[str, Any] | None = None
    ) -> Call[tuple[str, str]]:
        model = self.model_of(bulk_id)
        args = FINISH.pack(
            {
                "token": token,
                "state": state,
                "ttl_s": self.ttl_s,
                "id": bulk_id,
                "error_json": json.dumps(error) if error else "",
            }
        )
        return Call(_status_state(FINISH), "bulk_finish", self._all_keys(model, bulk_id), args)

    def feed(
        self,
        bulk_id: str,
        token: str,
        cursor: int,
        new_cursor: int,
        jobs: Sequence[tuple[int, str]],
        failed: Sequence[tuple[int, str]],
        cost: int,
    ) -> Call[str]:
        model = self.model_of(bulk_id)
        ks = [
            keys.bulk_key(model, bulk_id),
            keys.bulk_pending_key(model, bulk_id),
            keys.bulk_output_key(model, bulk_id),
        ]
        fixed = {
            "token": token,
            "cursor": cursor,
            "new_cursor": new_cursor,
            "n_jobs": len(jobs),
            "cost": cost,
        }
        args = FEED.pack(fixed, [{"index": i, "value": v} for i, v in (*jobs, *failed)])
        return Call(str, "bulk_feed", ks, args)

    def gather(
        self, bulk_id: str, token: str, ended: Sequence[tuple[int, str, str, bool]]
    ) -> Call[tuple[int, int] | None]:
        """Outcomes (index, job id, output line, succeeded); None: the lease is lost."""
        model = self.model_of(bulk_id)
        ks = [
            keys.bulk_key(model, bulk_id),
            keys.bulk_pending_key(model, bulk_id),
            keys.bulk_output_key(model, bulk_id),
        ]
        groups = [
            {"index": index, "id": job_id, "line": line, "ok": 1 if ok else 0}
            for index, job_id, line, ok in ended
        ]
        args = GATHER.pack({"token": token, "jprefix": keys.job_prefix(model)}, groups)

        def parse(r: list[Any]) -> tuple[int, int] | None:
            if r[0] == "lost":  # the reply's status alone
                return None
            head, _ = GATHER.unpack(r)
            return int(head["succeeded"]), int(head["failed"])

        return Call(parse, "bulk_gather", ks, args)

    def pending(self, bulk_id: str) -> Call[dict[int, str]]:
        pk = keys.bulk_pending_key(self.model_of(bulk_id), bulk_id)
        return Call(lambda r: {int(k): v for k, v in r[0].items()}, commands=[("HGETALL", pk)])

    def input_lines(self, bulk_id: str, start: int, stop: int) -> Call[list[str]]:
        """Lines start..stop-1."""
        ik = keys.bulk_input_key(self.model_of(bulk_id), bulk_id)
        return Call(lambda r: list(r[0]), commands=[("LRANGE", ik, start, stop - 1)])

    def output_chunk(
        self, bulk_id: str, start: int, stop: int, with_input: bool = True
    ) -> Call[tuple[list[str | None], list[str]]]:
        """Output lines start..stop-1 (None where absent) and, ``with_input``, the input
        lines beside them (a completed bulk job has every output line: none needed)."""
        model = self.model_of(bulk_id)
        cmds: list[tuple[Any, ...]] = [
            ("HMGET", keys.bulk_output_key(model, bulk_id), *range(start, stop))
        ]
        if with_input:
            cmds.append(("LRANGE", keys.bulk_input_key(model, bulk_id), start, stop - 1))
        return Call(lambda r: (list(r[0]), list(r[1]) if with_input else []), commands=cmds)

    def report(self, bulk_id: str, backlog: dict[str, int], rate_per_s: float) -> Call[None]:
        """A coordinator's poll, in one round trip: its backlog for the autoscaler and
        its rate for clients."""
        model = self.model_of(bulk_id)
        cmds = [
            ("HSET", keys.bulk_backlog_key(model), bulk_id, json.dumps(backlog)),
            ("HSET", keys.bulk_key(model, bulk_id), F.RATE, rate_per_s),
        ]
        return Call(lambda _: None, commands=cmds)

    def force_fail(self, bulk_id: str, error: dict[str, Any]) -> Call[tuple[str, str]]:
        """Fail a bulk job whose coordinators keep dying (no lease: the last one lapsed)."""
        return self.finish(bulk_id, "*", "failed", error)

    def forget(self, model: str, bulk_id: str) -> Call[None]:
        """Drop an ended (or expired) bulk job from the active set and the backlog."""
        cmds = [
            ("ZREM", keys.bulk_active_key(model), bulk_id),
            ("HDEL", keys.bulk_backlog_key(model), bulk_id),
        ]
        return Call(lambda _: None, commands=cmds)

    def touch_active(self, model: str, bulk_id: str, at_ms: int) -> Call[None]:
        """When the reaper looks at this bulk job next (unless a lease moves it first)."""
        cmd = ("ZADD", keys.bulk_active_key(model), "XX", at_ms, bulk_id)
        return Call(lambda _: None, commands=[cmd])

    def active(self, model: str, limit: int = 100) -> Call[list[str]]:
        """A model's unfinished bulk ids."""
        cmd = ("ZRANGE", keys.bulk_active_key(model), 0, limit - 1)
        return Call(lambda r: list(r[0]), commands=[cmd])

    def lapsed(self, model: str, now_ms: int, limit: int = 100) -> Call[list[str]]:
        """Unfinished bulk ids of a model whose coordinator lease lapsed by ``now_ms``."""
        cmd = ("ZRANGEBYSCORE", keys.bulk_active_key(model), "-inf", now_ms, "LIMIT", 0, limit)
        return Call(lambda r: list(r[0]), commands=[cmd])


def _status_state(sig: Signature) -> Callable[[list[Any]], tuple[str, str]]:
    """A {status, state} reply's parser."""

    def parse(r: list[Any]) -> tuple[str, str]:
        head, _ = sig.unpack(r)
        return str(head["status"]), str(head["state"])

    return parse
