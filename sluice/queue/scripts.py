"""The queue protocol's operations, defined once for the sync and async clients.

Each operation is a :class:`Call`: which Lua script (or which plain commands for
reads), its KEYS and ARGV, and a parser that turns the reply into a dataclass or
raises. The clients only execute calls, so both speak exactly the same protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from sluice import fastjson, keys, lua_loader
from sluice.config import ModelConfig
from sluice.errors import (
    JobConflict,
    JobNotFound,
    SluiceError,
)
from sluice.jobs import (
    DELIVERY_FIELDS,
    WEBHOOK_EVENTS,
    Batch,
    JobRecord,
    NewJob,
    Outcome,
    Owner,
    Submitted,
    Webhook,
    model_of,
    new_job_id,
    priority_rank,
)
from sluice.queue.call import Call
from sluice.queue.claim_args import RECLAIM_LIMIT, backoff_args, claim_fixed, ms, served_groups
from sluice.queue.partitions import Partitions, owned_idem
from sluice.queue.replies import claimed_job, parse_submit, parse_submits
from sluice.queue.signatures import CANCEL, CLAIM, COMPLETE, RECLAIM, RENEW, SIGNATURES, SUBMIT
from sluice.queue.spread import SpreadOps
from sluice.records import (
    HOOK_TTL_S,
    JobField,
)

T = TypeVar("T")
SCRIPT_NAMES = ("submit", "claim", "complete", "renew", "cancel", "reclaim")


def script_source(name: str) -> str:
    """A queue script as sent (sluice.lua_loader): the record layouts, the shared
    helpers and its signature's prologue before its body."""
    return lua_loader.source("sluice.queue", name, SIGNATURES[name])


def _dumps(value: Any) -> str:
    # orjson refuses a lone surrogate in a string (valid JSON, not valid UTF-8), and
    # fastjson then writes ASCII escapes: it would otherwise fail to encode for Redis
    # and lose the whole call.
    return fastjson.dumps(value)


def _durable(call: Call[T], cfg: ModelConfig) -> Call[T]:
    """``call`` with the model's durability: "replica" WAITs for one replica."""
    if cfg.queue.durability != "replica":
        return call
    return replace(call, replicas=1, replica_timeout_ms=cfg.queue.replica_ack_timeout_ms)


def with_durability(call: Call[T], models: Mapping[str, ModelConfig]) -> Call[T]:
    """``call`` with the durability of the model it names in ``durability_of``."""
    cfg = models.get(call.durability_of) if call.durability_of and not call.replicas else None
    return _durable(call, cfg) if cfg is not None else call


def _submit_group(
    job: NewJob, model: str, partition: int, owner: str, default_deadline_ms: int
) -> dict[str, Any]:
    """One job's repeated group of ``submit.lua``'s arguments (SUBMIT's signature)."""
    return {
        "id": job.id or new_job_id(model, partition),
        "bucket": job.bucket,
        "cost": int(job.cost),
        "prio": priority_rank(job.priority),
        "input": _dumps(job.input),
        "meta": _dumps(job.metadata) if job.metadata else "",
        "deadline": int(job.deadline_ms or default_deadline_ms),
        "idem": _idem(owner, job.idempotency_key),
        "whu": job.webhook.url if job.webhook else "",
        "whe": _events(job.webhook),
        "rqh": job.request_hash,
    }


class QueueOps(SpreadOps):
    """Builds the calls of the protocol from the config of each model."""

    def __init__(self, models: dict[str, ModelConfig], hook_ttl_s: int = HOOK_TTL_S) -> None:
        self.models = models
        self.parts = Partitions(models)
        # How long a webhook delivery's record lives: the retry horizon and a day.
        self.hook_ttl_s = hook_ttl_s

    def model(self, name: str) -> ModelConfig:
        return self.models[name]

    # -- submit ---------------------------------------------------------------
    def submit(
        self,
        model: str,
        jobs: Sequence[NewJob],
        *,
        max_jobs: int = 0,
        max_cost: int = 0,
        owner: Owner | None = None,
        fence: tuple[str, str] | None = None,
        partition: int | None = None,
    ) -> Call[list[Submitted]]:
        """``fence``: (hash key in this model's slot, token): nothing is written unless
        that hash's ``token`` is the token (else :class:`LeaseLost`). ``partition``:
        where the jobs go (default: ``Partitions.for_submit``'s choice, ADR 0159)."""
        lim = (max_jobs, max_cost, owner, fence, partition)
        return self._submit_call(parse_submit, model, [jobs], *lim)

    def submit_many(
        self,
        model: str,
        requests: Sequence[Sequence[NewJob]],
        *,
        max_jobs: int = 0,
        max_cost: int = 0,
        owner: Owner | None = None,
        fence: tuple[str, str] | None = None,
        partition: int | None = None,
    ) -> Call[list[list[Submitted] | SluiceError]]:
        """Several requests' jobs in one script call (ADR 0161), sharing the limits,
        owner, fence and partition: each request is admitted (all or none) as if sent
        alone after the ones before it, and gets its own outcome, a refusal included."""
        lim = (max_jobs, max_cost, owner, fence, partition)
        return self._submit_call(parse_submits, model, requests, *lim)

    def _submit_call(
        self,
        parse: Callable[[Any], T],
        model: str,
        requests: Sequence[Sequence[NewJob]],
        max_jobs: int,
        max_cost: int,
        owner: Owner | None,
        fence: tuple[str, str] | None,
        partition: int | None,
    ) -> Call[T]:
        cfg = self.model(model)
        o = owner or _NO_OWNER
        p = partition
        if p is None:
            flat = [job for jobs in requests for job in jobs]
            p = self.parts.for_submit(model, flat, o.name, fence is not None)
        lim = self.parts.shares(model, max_jobs, max_cost, o)
        fixed = {
            "jprefix": keys.job_prefix(model, p),
            "qprefix": keys.queue_prefix(model, p),
            "iprefix": keys.idempotency_prefix(model, p),
            "max_jobs": lim.max_jobs,
            "max_cost": lim.max_cost,
            "idem_ttl": cfg.queue.idempotency_ttl_s,
            "wprefix": keys.wake_prefix(model, p),
            "owner": o.name,
            "owner_max": lim.owner_max,
            "rate": lim.rate,
            "burst": max(1, lim.burst),
            "fence_token": fence[1] if fence else "",
            "hook_ttl": self.hook_ttl_s,
            "requests": ",".join(str(len(jobs)) for jobs in requests),
        }
        default_dl = cfg.queue.default_deadline_ms or 0
        groups = [
            _submit_group(job, model, p, o.name, default_dl) for jobs in requests for job in jobs
        ]
        args = SUBMIT.pack(fixed, groups)
        ks = [
            keys.stats_key(model, p),
            keys.seq_key(model, p),
            keys.owner_jobs_key(model, p),
            keys.rate_limit_key(model, p),
            fence[0] if fence else keys.stats_key(model, p),  # unread without a token
            keys.paused_key(model, p),
        ]
        ks += [keys.queue_key(model, b, p) for b in cfg.bucket_names]
        return _durable(Call(parse, "submit", ks, args), cfg)

    # -- claim ----------------------------------------------------------------
    def claim(
        self,
        model: str,
        worker_id: str,
        *,
        buckets: Sequence[str] | None = None,
        max_batch: int | None = None,
        max_batch_tokens: int | None = None,
        service_ms: dict[str, float] | None = None,
        bulk: bool = True,
        partition: int = 0,
    ) -> Call[Batch]:
        """``bulk=False``: never a batch of bulk items (a worker's prefetch, ADR 0090),
        and the worker counts as holding a batch (the one it runs: ADR 0164).
        One partition's queues (the clients' ``claim`` visits them in turn)."""
        p = partition
        cfg = self.model(model)
        served = list(buckets) if buckets else cfg.bucket_names
        args = CLAIM.pack(
            claim_fixed(cfg, model, worker_id, p, max_batch, max_batch_tokens, bulk),
            served_groups(cfg, served, service_ms),
        )
        # The worker registry lives in partition 0: a partition p >= 1 passes its own
        # (empty) keys, so its claims see no other serving worker (ADR 0164, 0166).
        ks = [*self._ks(model, p), keys.bulk_holders_key(model, p), keys.workers_key(model, p)]
        ks += [keys.idle_workers_key(model, p), keys.retry_key(model, p)]
        ks += [keys.paused_key(model, p), keys.busy_workers_key(model, p)]
        ks += [keys.workers_info_key(model, p), *(keys.queue_key(model, n, p) for n in served)]

        def parse(reply: list[Any]) -> Batch:
            head, claimed = CLAIM.unpack(reply)
            jobs = [claimed_job(j) for j in claimed]
            return Batch(
                model,
                head["bucket"],
                int(head["now"]),
                jobs,
                int(head["expired"]),
                int(head["reclaimed"]),
            )

        return Call(parse, "claim", ks, args)

    # -- complete, renew, reclaim, cancel ----------------------------------------
    def _ks(self, model: str, p: int = 0) -> list[str]:
        return [
            keys.inflight_key(model, p),
            keys.stats_key(model, p),
            keys.dead_letter_key(model, p),
            keys.owner_jobs_key(model, p),
        ]

    def complete(
        self, model: str, outcomes: Sequence[Outcome], worker_id: str = ""
    ) -> Call[tuple[int, int]]:
        """Outcomes of one batch; with ``worker_id``, retry/fail/release count only
        while that worker still holds the job (a lapsed lease cannot give it back).
        Every outcome's job is in one partition (``complete_calls`` splits them)."""
        cfg = self.model(model)
        p = keys.partition_of(outcomes[0].id) if outcomes else 0
        fixed = {
            "jprefix": keys.job_prefix(model, p),
            "qprefix": keys.queue_prefix(model, p),
            "channel": keys.done_channel(model),
            "result_ttl": cfg.queue.result_ttl_s,
            "dead_ttl": cfg.queue.dead_letter_ttl_s,
            "max_attempts": cfg.batching.max_attempts,
            "reporter": worker_id,
            "wprefix": keys.wake_prefix(model, p),
            "eprefix": keys.e2e_hist_prefix(model, p),
            "nprefix": keys.notify_prefix(model, p),
            "max_run_ms": cfg.limits.max_run_ms or 0,
            **backoff_args(cfg),
        }
        groups = [
            {
                "id": o.id,
                "kind": o.kind,
                "payload": _dumps(o.payload),
                "run_ms": round(float(o.run_ms), 3),
            }
            for o in outcomes
        ]
        args = COMPLETE.pack(fixed, groups)
        ks = [*self._ks(model, p), keys.bulk_holders_key(model, p), keys.retry_key(model, p)]

        def parse(reply: list[Any]) -> tuple[int, int]:
            head, _ = COMPLETE.unpack(reply)
            return int(head["accepted"]), int(head["stale"])

        return _durable(Call(parse, "complete", ks, args), cfg)

    def renew(self, model: str, worker_id: str, job_ids: Sequence[str]) -> Call[list[str]]:
        """The ids not renewed (:meth:`renew_why` says why)."""
        why = self.renew_why(model, worker_id, job_ids)
        return Call(lambda r: list(why.parse(r)), why.script, why.keys, why.args)

    def renew_why(self, model: str, worker_id: str, job_ids: Sequence[str]) -> Call[dict[str, str]]:
        """Renew; for each id not renewed, why: ``records.LEASE_LOST`` or how the job
        ended (the renewal ends a job past its deadline or limits.max_run_ms)."""
        cfg = self.model(model)
        p = keys.partition_of(job_ids[0]) if job_ids else 0  # one partition's jobs
        fixed = {
            "jprefix": keys.job_prefix(model, p),
            "worker": worker_id,
            "lease_ms": ms(cfg.batching.lease_s),
            "channel": keys.done_channel(model),
            "nprefix": keys.notify_prefix(model, p),
            "result_ttl": cfg.queue.result_ttl_s,
            "dead_ttl": cfg.queue.dead_letter_ttl_s,
            "max_run_ms": cfg.limits.max_run_ms or 0,
        }
        args = RENEW.pack(fixed, [{"id": j} for j in job_ids])
        ks = [keys.inflight_key(model, p), keys.bulk_holders_key(model, p)]
        ks += [keys.stats_key(model, p), keys.dead_letter_key(model, p)]
        ks += [keys.owner_jobs_key(model, p)]
        return Call(lambda r: {g["id"]: g["why"] for g in RENEW.unpack(r)[1]}, "renew", ks, args)

    def reclaim(self, model: str, limit: int = RECLAIM_LIMIT, partition: int = 0) -> Call[int]:
        cfg, p = self.model(model), partition
        args = RECLAIM.pack(
            {
                "jprefix": keys.job_prefix(model, p),
                "qprefix": keys.queue_prefix(model, p),
                "channel": keys.done_channel(model),
                "limit": limit,
                "max_attempts": cfg.batching.max_attempts,
                "dead_ttl": cfg.queue.dead_letter_ttl_s,
                "wprefix": keys.wake_prefix(model, p),
                "nprefix": keys.notify_prefix(model, p),
                **backoff_args(cfg),
            }
        )
        ks = [*self._ks(model, p), keys.retry_key(model, p)]
        return Call(lambda r: int(RECLAIM.unpack(r)[0]["reclaimed"]), "reclaim", ks, args)

    def cancel(self, job_id: str, owner: str = "") -> Call[str]:
        """With ``owner``, a job another API key submitted is not found (404, not 403)."""
        model = self._model_of(job_id)
        p = keys.partition_of(job_id)
        ks = [
            keys.inflight_key(model, p),
            keys.stats_key(model, p),
            keys.job_key(model, job_id),
            keys.owner_jobs_key(model, p),
            keys.retry_key(model, p),
        ]
        args = CANCEL.pack(
            {
                "qprefix": keys.queue_prefix(model, p),
                "channel": keys.done_channel(model),
                "id": job_id,
                "result_ttl": self.model(model).queue.result_ttl_s,
                "owner": owner,
                "jprefix": keys.job_prefix(model, p),
                "nprefix": keys.notify_prefix(model, p),
            }
        )

        def parse(reply: list[str]) -> str:
            head, _ = CANCEL.unpack(reply)
            outcome, status = head["outcome"], head["status"]
            if outcome == "missing":
                raise JobNotFound(f"job {job_id!r} not found")
            if outcome == "refused":
                raise JobConflict(f"job {job_id!r} already {status}", status)
            return str(status)

        return Call(parse, "cancel", ks, args)

    # -- idle wait ------------------------------------------------------------
    def _served(self, model: str, buckets: Sequence[str] | None) -> list[str]:
        return list(buckets) if buckets else self.model(model).bucket_names

    def wait_for_work(
        self,
        model: str,
        timeout_s: float,
        buckets: Sequence[str] | None = None,
        partition: int = 0,
    ) -> Call[bool]:
        """Block until a wake token of a served bucket of ``partition`` arrives (True)
        or ``timeout_s`` passes (False). Submit (and a requeue) pushes tokens; an
        empty claim drops the stale ones first, so call this after one."""
        timeout = max(0.01, round(timeout_s, 3))  # BLPOP 0 would block forever
        wakes = [keys.wake_key(model, b, partition) for b in self._served(model, buckets)]
        return Call(lambda r: r[0] is not None, commands=[("BLPOP", *wakes, timeout)])

    # -- reads ----------------------------------------------------------------
    def _model_of(self, job_id: str) -> str:
        model = model_of(job_id)
        if model is None or model not in self.models:
            raise JobNotFound(f"job {job_id!r} not found")
        return model

    def get(self, job_id: str, model: str | None = None) -> Call[JobRecord]:
        owner = self._model_of(job_id)
        if model is not None and owner != model:
            raise JobNotFound(f"job {job_id!r} not found")

        def parse(replies: list[Any]) -> JobRecord:
            if not replies[0]:
                raise JobNotFound(f"job {job_id!r} not found")
            return JobRecord.from_hash(owner, {"id": job_id, **replies[0]}, replies[1])

        return Call(
            parse,
            commands=[
                ("HGETALL", keys.job_key(owner, job_id)),
                ("HMGET", keys.delivery_key(owner, job_id), *DELIVERY_FIELDS),
            ],
        )

    def get_plain(self, job_id: str) -> Call[JobRecord | None]:
        """The job's record alone (one command, not ``get``'s two): None when the job
        has a webhook, whose delivery its view shows (read it with :meth:`get`). A job
        without one reads exactly as ``get`` reads it (ADR 0168)."""
        owner = self._model_of(job_id)

        def parse(replies: list[Any]) -> JobRecord | None:
            if not replies[0]:
                raise JobNotFound(f"job {job_id!r} not found")
            raw = replies[0]
            if raw.get(JobField.WHU):
                return None
            raw.setdefault(JobField.ID, job_id)  # as {"id": job_id, **raw}, without the copy
            return JobRecord.from_hash(owner, raw, None)

        return Call(parse, commands=[("HGETALL", keys.job_key(owner, job_id))])


_NO_OWNER = Owner("")


def _events(hook: Webhook | None) -> str:
    """A webhook's events as stored: '' for every job event (the default)."""
    if hook is None or set(hook.events) == set(WEBHOOK_EVENTS):
        return ""
    return ",".join(hook.events)


_idem = owned_idem
