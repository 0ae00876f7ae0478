"""Webhook deliveries' Redis calls, defined once for the sync and async clients.

A delivery is born in the Lua script that ends its job (or bulk job): a hash
``keys.delivery_key`` and an entry in the model's due zset, in the same call
(sluice/queue/lua/_common.lua, ``publish_ended``). The notifier claims due
entries with a lease (``claim``), sends, and records each attempt (``done``).
Like :class:`sluice.queue.scripts.QueueOps`, every operation is a
:class:`~sluice.queue.scripts.Call`; a client runs them after
``client.register(scripts())``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from sluice import fastjson, keys, lua_loader
from sluice.errors import JobNotFound
from sluice.jobs import DELIVERY_FIELDS, delivery_view, model_of
from sluice.queue.scripts import Call
from sluice.records import DeliveryField as D
from sluice.webhooks.signatures import CLAIM, DONE, REDELIVER, SIGNATURES

SCRIPT_NAMES = ("claim", "done", "redeliver")
LOG_KEEP = 20  # attempts kept in a delivery's log
DELIVERED_TTL_S = 86400  # a delivered record is kept this long (GET /v1/jobs/{id} shows it)
DEAD_TTL_S = 7 * 86400  # a given-up one this long (the delivery dead-letter list)


@cache
def _sources() -> dict[str, str]:
    return {
        f"webhook_{n}": lua_loader.source("sluice.webhooks", n, SIGNATURES[n]) for n in SCRIPT_NAMES
    }


def scripts() -> dict[str, str]:
    """The delivery scripts by call name, for ``client.register``."""
    return dict(_sources())


@dataclass(frozen=True, slots=True)
class Claimed:
    """One leased delivery attempt."""

    model: str
    id: str  # the job's (or bulk job's) id; the webhook-id is derived from it
    token: str
    attempt: int  # 1 for the first
    fails: int  # failed attempts since the delivery (or its redelivery) began
    client_errors: int
    url: str
    event: str
    owner: str
    kind: str  # 'job' | 'bulk'
    first_ms: int  # when this round of attempts began (the horizon counts from it)
    ended_ms: int  # when the job ended
    # A body stored by a notifier before the delivery kept none ('' now): every
    # attempt renders the body from ``record``, the ended (unchanging) job's hash.
    body: str
    record: dict[str, str] = field(default_factory=dict)  # empty once it has expired
    host: str = ""  # the URL's host, as the claim counted it against per_host

    @property
    def webhook_id(self) -> str:
        return f"msg_{self.id}"


@dataclass(frozen=True, slots=True)
class ClaimBatch:
    """What one claim leased."""

    claimed: list[Claimed]
    more: bool  # more may be leasable now (the batch filled, or a look was cut): again
    now_ms: int  # the Redis clock when it ran
    # Some host has a lane (deliveries waiting for a slot there): an attempt that
    # ends frees a slot the next claim fills from its lane.
    laned: bool = False


@dataclass(frozen=True, slots=True)
class DeliveryView:
    """A delivery as the admin routes show it: what GET /v1/jobs/{id} shows
    (``sluice.jobs.delivery_view``), with its event, URL and attempt log."""

    fields: dict[str, Any]  # state, attempts, last_status, ... (delivery_view)
    event: str
    url: str
    log: list[dict[str, Any]]

    @property
    def state(self) -> str:
        return str(self.fields["state"])

    def public(self) -> dict[str, Any]:
        return {"state": self.state, "event": self.event} | self.fields


VIEW_FIELDS = (*DELIVERY_FIELDS, D.EVENT, D.URL, D.LOG)


def view_from(values: Sequence[Any]) -> DeliveryView | None:
    """A delivery from an HMGET of VIEW_FIELDS; None when there is none."""
    n = len(DELIVERY_FIELDS)
    fields = delivery_view(list(values[:n]))
    if fields is None:
        return None
    event, url, raw_log = values[n:]
    try:
        log = fastjson.loads(raw_log) if raw_log else []
    except ValueError:
        log = []
    return DeliveryView(
        fields, str(event or ""), str(url or ""), log if isinstance(log, list) else []
    )


@dataclass(frozen=True, slots=True)
class Backlog:
    """A model's deliveries as the notifier's metrics and ``sluice status`` see them."""

    model: str
    pending: int  # not yet delivered nor given up (due now, leased or waiting to retry)
    due: int  # due now, not leased (those in a full host's lane included)
    oldest_due_s: float  # how long the oldest due one has waited (0: none)
    dead: int


class WebhookOps:
    """``spans``: how many partitions each model's deliveries are spread over (its
    ``queue.partitions``, docs/adr/0159; 1 when absent)."""

    def __init__(self, models: Sequence[str], spans: Mapping[str, int] | None = None) -> None:
        self.models = list(models)
        self.spans = dict(spans or {})

    def span(self, model: str) -> int:
        return self.spans.get(model, 1)

    def claim(self, model: str, who: str, lease_ms: int, limit: int) -> Call[list[Claimed]]:
        """Lease up to ``limit`` due deliveries, whatever their host."""
        batch = self.claim_batch(model, who, lease_ms, limit, scan=limit)
        return Call(lambda r: batch.parse(r).claimed, batch.script, batch.keys, batch.args)

    def claim_batch(
        self,
        model: str,
        who: str,
        lease_ms: int,
        limit: int,
        *,
        per_host: int = 0,
        busy: Mapping[str, int] | None = None,
        scan: int = 256,
        lanes_max: int = 64,
        partition: int = 0,
    ) -> Call[ClaimBatch]:
        """Lease up to ``limit`` due deliveries: first from the lanes of hosts with a
        free slot (``per_host`` less this notifier's attempts in flight there,
        ``busy``, and what this call leases), earliest first, ``lanes_max`` hosts at
        most; then from the due zset in due order, ``scan`` entries at most, moving
        one whose host is full into its host's lane (docs/adr/0139)."""

        def parse(r: list[Any]) -> ClaimBatch:
            head, groups = CLAIM.unpack(r)
            out = [
                Claimed(
                    model, str(g["id"]), str(g["token"]), int(g["att"]), int(g["fails"]),
                    int(g["cerr"]), str(g["url"]), str(g["event"]), str(g["owner"]),
                    str(g["kind"]), int(g["first"]), int(g["ended"]), str(g["body"]),
                    dict(zip(g["record"][::2], g["record"][1::2], strict=True)),
                    str(g["host"]),
                )
                for g in groups
            ]  # fmt: skip
            return ClaimBatch(
                out, bool(int(head["more"])), int(head["now"]), bool(int(head["laned"]))
            )

        p = partition  # bulk deliveries live in partition 0 (bulk keys are there)
        values = {
            "nprefix": keys.notify_prefix(model, p), "lease_ms": lease_ms, "limit": limit,
            "who": who, "jprefix": keys.job_prefix(model, p), "bprefix": keys.bulk_key(model, ""),
            "per_host": per_host, "scan": max(1, scan),
            "lprefix": keys.deliveries_lane_prefix(model, p), "lanes_max": max(1, lanes_max),
        }  # fmt: skip
        groups = [{"host": h, "busy": n} for h, n in (busy or {}).items() if n > 0]
        args = CLAIM.pack(values, groups)
        ks = [
            keys.deliveries_due_key(model, p),
            keys.deliveries_lanes_key(model, p),
            keys.deliveries_lane_sizes_key(model, p),
        ]
        return Call(parse, "webhook_claim", ks, args)

    def done(
        self,
        c: Claimed,
        nxt: str,
        *,
        retry_ms: int = 0,
        status: int = 0,
        error: str = "",
        latency_ms: float = 0.0,
        client_error: bool = False,
    ) -> Call[bool]:
        """Record the attempt; False when the lease was no longer this attempt's. A
        delivery that ends lets its job's record go back to its own TTL."""
        record = keys.bulk_key if c.kind == "bulk" else keys.job_key
        p = keys.partition_of(c.id)
        ks = [
            keys.deliveries_due_key(c.model, p),
            keys.delivery_key(c.model, c.id),
            keys.deliveries_dead_key(c.model, p),
            record(c.model, c.id),
        ]
        args = DONE.pack(
            {
                "id": c.id,
                "token": c.token,
                "outcome": nxt,
                "retry_ms": retry_ms,
                "http_status": status,
                "failure": error[:300],
                "latency_ms": round(latency_ms, 1),
                "client_error": 1 if client_error else 0,
                "delivered_ttl": DELIVERED_TTL_S,
                "dead_ttl": DEAD_TTL_S,
                "log_keep": LOG_KEEP,
            }
        )
        return Call(lambda r: DONE.unpack(r)[0]["status"] == "ok", "webhook_done", ks, args)

    def redeliver(self, delivery_id: str, ttl_s: int) -> Call[str]:
        """Send again from now; the previous state (JobNotFound when there is none)."""
        model = self.model_of(delivery_id)
        p = keys.partition_of(delivery_id)
        ks = [
            keys.deliveries_due_key(model, p),
            keys.delivery_key(model, delivery_id),
            keys.deliveries_dead_key(model, p),
            keys.deliveries_wake_key(model, p),
            keys.job_key(model, delivery_id),
            keys.bulk_key(model, delivery_id),
        ]

        def parse(r: list[str]) -> str:
            head, _ = REDELIVER.unpack(r)
            if head["status"] == "missing":
                raise JobNotFound(f"no webhook delivery for {delivery_id!r}")
            return str(head["state"])

        args = REDELIVER.pack({"id": delivery_id, "ttl_s": ttl_s})
        return Call(parse, "webhook_redeliver", ks, args)

    def model_of(self, delivery_id: str) -> str:
        model = model_of(delivery_id)
        if model is None or model not in self.models:
            raise JobNotFound(f"no webhook delivery for {delivery_id!r}")
        return model

    def view(self, delivery_id: str) -> Call[DeliveryView | None]:
        model = self.model_of(delivery_id)
        dk = keys.delivery_key(model, delivery_id)
        return Call(lambda r: view_from(r[0]), commands=[("HMGET", dk, *VIEW_FIELDS)])

    def owner(self, delivery_id: str) -> Call[str | None]:
        model = self.model_of(delivery_id)
        dk = keys.delivery_key(model, delivery_id)
        return Call(lambda r: r[0], commands=[("HGET", dk, D.OWNER)])

    def backlog(self, model: str, now_ms: int) -> Call[Backlog]:
        """Pending and due deliveries count the lanes' entries too (every one is due:
        it moved into its host's lane when due), and the oldest due is the earlier of
        the due zset's head and the lanes' earliest (docs/adr/0139)."""
        span = self.span(model)

        def parse(r: list[Any]) -> Backlog:
            pending = due_n = dead = 0
            heads: list[float] = []
            for p in range(span):
                c = r[6 * p : 6 * p + 6]
                heads += [float(s) for _, s in [*c[2], *c[4]]]
                laned = sum(int(n) for n in c[5])
                pending, due_n = pending + int(c[0]) + laned, due_n + int(c[1]) + laned
                dead += int(c[3])
            wait = max(0.0, (now_ms - min(heads)) / 1000) if heads else 0.0
            return Backlog(model, pending, due_n, wait, dead)

        cmds: list[tuple[Any, ...]] = []
        for p in range(span):
            due = keys.deliveries_due_key(model, p)
            cmds += [
                ("ZCARD", due),
                ("ZCOUNT", due, "-inf", now_ms),
                ("ZRANGE", due, 0, 0, "WITHSCORES"),
                ("LLEN", keys.deliveries_dead_key(model, p)),
                ("ZRANGE", keys.deliveries_lanes_key(model, p), 0, 0, "WITHSCORES"),
                ("HVALS", keys.deliveries_lane_sizes_key(model, p)),
            ]
        return Call(parse, commands=cmds)

    def dead(self, model: str, limit: int = 100) -> Call[list[str]]:
        cmds = [
            ("LRANGE", keys.deliveries_dead_key(model, p), 0, limit - 1)
            for p in range(self.span(model))
        ]
        return Call(lambda r: [i for ids in r for i in ids][:limit], commands=cmds)

    def wait(self, timeout_s: float, per_model: bool = False) -> list[Call[bool]]:
        """Block until any model's wake list has a token (True) or the timeout: one
        BLPOP over every model's list, or with ``per_model`` (Redis Cluster, where the
        lists sit in different slots) one BLPOP per model, to run side by side."""
        timeout = max(0.01, round(timeout_s, 3))
        lists = [[keys.deliveries_wake_key(m, p)] for m in self.models for p in range(self.span(m))]
        groups = lists if per_model else [[k for g in lists for k in g]]
        return [Call(lambda r: r[0] is not None, commands=[("BLPOP", *g, timeout)]) for g in groups]
