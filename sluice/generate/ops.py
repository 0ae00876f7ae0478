"""A generative worker's decode step against Redis: one round trip (ADR 0146).

:func:`run_step` pipelines, unacknowledged as one batch: the step script
(``sluice/generate/lua/step.lua``: every active sequence's new tokens appended to
its job's stream, its lease renewed, the jobs no longer this worker's reported
lost; the end or error entries of the jobs that finished), the queue's
``complete`` for those, and the queue's ``claim`` for the free slots. Never one
round trip per token or per job.

Claiming into slots: a generative job's cost (prompt plus expected output,
:mod:`sluice.generate.admission`) never exceeds ``generate.max_seq_tokens``; the
claim is count-limited by the free slots and its token budget is the free slots'
whole KV budget, so a job's cost never keeps it out of a slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sluice import fastjson, keys, lua_loader
from sluice.config import GenerateConfig, ModelConfig
from sluice.generate.params import GenerateResult
from sluice.generate.signatures import SIGNATURES, STEP
from sluice.jobs import Batch, Outcome
from sluice.queue.client import QueueClient
from sluice.queue.scripts import Call, QueueOps
from sluice.records import JobField

STEP_SCRIPT = "generate_step"
FAILED_TYPE = "generation_failed"  # the error type of a Finished with an error


@dataclass(frozen=True, slots=True)
class Append:
    """One active sequence's news in this step. Send one for every active job every
    step, with no tokens while it prefills: it renews the lease and says whether
    the job is still this worker's."""

    job_id: str
    attempt: int
    index: int  # output offset of token_ids[0]
    token_ids: tuple[int, ...] = ()
    text: str = ""
    started: bool = False  # this run's first append: START (attempt 1) or RESTART first


@dataclass(frozen=True, slots=True)
class Finished:
    """A sequence that ended: ``result`` (an END entry, the job succeeded) or
    ``error`` (an ERROR entry, the job failed: dead-lettered, never run again).
    ``retry`` with an ``error``: the run failed but the job may run again (the
    queue's retry: an attempt used, dead-lettered after ``max_attempts``); nothing
    is written to its stream (the next run's RESTART supersedes this one's)."""

    job_id: str
    attempt: int
    result: GenerateResult | None
    error: str | None = None
    retry: bool = False


@dataclass(frozen=True, slots=True)
class StepReply:
    batch: Batch  # jobs claimed into the free slots this step (possibly empty)
    # Active job ids cancelled or no longer leased to this worker at this attempt:
    # abort them and write nothing more for them.
    lost: frozenset[str]
    now_ms: int = 0  # the server's clock at the step script (0: no script ran)


def scripts() -> dict[str, str]:
    """The step script by call name, for ``QueueClient.register``."""
    return {STEP_SCRIPT: lua_loader.source("sluice.generate", "step", SIGNATURES["step"])}


def generate_config(cfg: ModelConfig, model: str) -> GenerateConfig:
    if cfg.generate is None:
        raise ValueError(f"model {model!r} has no generate section: not a generative model")
    return cfg.generate


def claim_budget(cfg: ModelConfig, free_slots: int) -> int:
    """The claim's token budget for ``free_slots``: every free slot's whole KV budget,
    plus one of the largest bucket, so the claim script's flooring to the bucket's
    bound never takes a slot's worth away: only the count limits a claim."""
    g = generate_config(cfg, "?")
    return free_slots * max(g.max_seq_tokens, cfg.buckets[-1]) + cfg.buckets[-1]


def _group(job_id: str, attempt: int, kind: str, **kw: Any) -> dict[str, Any]:
    g = {"id": job_id, "att": int(attempt), "kind": kind, "start": 0, "idx": 0, "ids": "[]"}
    return g | {"text": "", "payload": "", "ntok": 0} | kw


def _sendable(text: str) -> str:
    """``text`` as Redis can take it: a lone surrogate (never valid UTF-8) would fail
    the whole step's encoding, every sequence's tokens with it; it becomes U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode()
        return text
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)


def _append_group(a: Append) -> dict[str, Any]:
    ids = fastjson.dumps(list(a.token_ids)) if a.token_ids else "[]"
    text = _sendable(a.text)
    return _group(
        a.job_id,
        a.attempt,
        "tokens",
        start=int(a.started),
        idx=int(a.index),
        ids=ids,
        text=text,
        ntok=len(a.token_ids),
    )


def _finished_group(f: Finished) -> dict[str, Any]:
    if f.result is not None:
        payload = fastjson.dumps(f.result.to_dict())
        return _group(f.job_id, f.attempt, "end", payload=payload, ntok=len(f.result.token_ids))
    return _group(f.job_id, f.attempt, "error", payload=_error_json(f))


def _error_json(f: Finished) -> str:
    return fastjson.dumps({"type": FAILED_TYPE, "message": f.error or "generation failed"})


def step_call(
    ops: QueueOps,
    model: str,
    worker_id: str,
    appends: Sequence[Append],
    finished: Sequence[Finished],
) -> Call[tuple[int, frozenset[str]]]:
    """The step script's call: (server now ms, the lost ids of ``appends``)."""
    cfg = ops.model(model)
    g = generate_config(cfg, model)
    args = STEP.pack(
        {
            "jprefix": keys.job_prefix(model),
            "sprefix": keys.stream_prefix(model),
            "tprefix": keys.ttft_hist_prefix(model),
            "worker": worker_id,
            "lease_ms": max(1, int(cfg.batching.lease_s * 1000)),
            "maxlen": g.stream_maxlen,
            "result_ttl": cfg.queue.result_ttl_s,
            "dead_ttl": cfg.queue.dead_letter_ttl_s,
            "max_run_ms": cfg.limits.max_run_ms or 0,
            "channel": keys.done_channel(model),
            "nprefix": keys.notify_prefix(model),
        },
        [
            *(_append_group(a) for a in appends),
            *(_finished_group(f) for f in finished if not f.retry),
        ],
    )
    ks = [keys.inflight_key(model), keys.stats_key(model)]
    ks += [keys.dead_letter_key(model), keys.owner_jobs_key(model)]

    def parse(reply: list[Any]) -> tuple[int, frozenset[str]]:
        head, lost = STEP.unpack(reply)
        return int(head["now"]), frozenset(str(g["lost"]) for g in lost)

    return Call(parse, STEP_SCRIPT, ks, args)


def outcomes(finished: Sequence[Finished]) -> list[Outcome]:
    """The queue outcomes of the finished sequences: ok with the result, retry, or
    fail."""
    out = []
    for f in finished:
        if f.result is not None:
            out.append(Outcome.ok(f.job_id, f.result.to_dict()))
        elif f.retry:
            out.append(Outcome.retry(f.job_id, FAILED_TYPE, f.error or "generation failed"))
        else:
            out.append(Outcome.fail(f.job_id, FAILED_TYPE, f.error or "generation failed"))
    return out


def step_calls(
    ops: QueueOps,
    model: str,
    worker_id: str,
    appends: Sequence[Append],
    finished: Sequence[Finished],
    free_slots: int,
    **claim_kw: Any,
) -> list[Call[Any]]:
    """The step's calls in pipeline order: step script, complete, claim (each only
    when it has something to do)."""
    calls: list[Call[Any]] = []
    if appends or finished:
        calls.append(step_call(ops, model, worker_id, appends, finished))
    if finished:
        calls.append(ops.complete(model, outcomes(finished), worker_id))
    if free_slots > 0:
        kw = {"max_batch_tokens": claim_budget(ops.model(model), free_slots)} | claim_kw
        # Never a bulk batch: a bulk line is not a generative job's admitted input
        # (the gateway refuses bulk uploads to a generative model).
        kw["bulk"] = False
        calls.append(ops.claim(model, worker_id, max_batch=free_slots, **kw))
    return calls


def run_step(
    qc: QueueClient,
    model: str,
    worker_id: str,
    appends: Sequence[Append],
    finished: Sequence[Finished],
    free_slots: int,
    **claim_kw: Any,
) -> StepReply:
    """One decode step's round trip (module docstring). ``claim_kw``: the queue
    claim's keywords (``buckets``, ``service_ms``, ``max_batch_tokens``; ``bulk`` is
    always off)."""
    qc.register(scripts())
    calls = step_calls(qc.ops, model, worker_id, appends, finished, free_slots, **claim_kw)
    replies = qc.run_all(calls) if calls else []
    now, lost = replies[0] if (appends or finished) else (0, frozenset())
    batch = replies[-1] if free_slots > 0 else Batch(model, "", now, [])
    return StepReply(batch, lost, now)


def held_jobs(qc: QueueClient, model: str, worker_id: str, chunk: int = 500) -> list[str]:
    """The model's running jobs leased to ``worker_id``: one scan of its in-flight
    set. For the rare reconcile after a step whose reply was lost (ADR 0146): a
    claim may have run, leasing jobs the worker never learnt of."""
    raw: list[Any] = qc.redis.zrange(keys.inflight_key(model), 0, -1)
    ids = [i.decode() if isinstance(i, bytes) else str(i) for i in raw]
    held: list[str] = []
    for at in range(0, len(ids), chunk):
        part = ids[at : at + chunk]
        pipe = qc.redis.pipeline(transaction=False)
        for job_id in part:
            pipe.hmget(keys.job_key(model, job_id), [JobField.STATUS, JobField.WORKER])
        for job_id, (status, worker) in zip(part, pipe.execute(), strict=True):
            if _text(status) == "running" and _text(worker) == worker_id:
                held.append(job_id)
    return held


def _text(v: Any) -> str | None:
    return v.decode() if isinstance(v, bytes) else v
