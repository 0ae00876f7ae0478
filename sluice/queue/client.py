"""Thin executors of the protocol's calls: one round trip each.

``QueueClient`` (sync, redis-py) serves workers and tools; ``AsyncQueueClient``
(redis.asyncio) serves the gateway. Both run the same :class:`QueueOps` calls.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, TypeVar

import redis
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, ResponseError

from sluice.config import ModelConfig
from sluice.connection import (
    DEMOTED,
    UNAVAILABLE_ERRORS,
    ClientOptions,
    async_client,
    demoted,
    forget_primary,
    forget_primary_async,
    is_cluster,
    read_timeout_s,
    slot_moving,
    sync_client,
)
from sluice.errors import ConfigError, NotReplicated, RedisUnavailable
from sluice.jobs import Batch, JobRecord, NewJob, Outcome, QueueStats, Submitted
from sluice.queue.claim_args import merged_claims
from sluice.queue.scripts import SCRIPT_NAMES, Call, QueueOps, script_source, with_durability

T = TypeVar("T")
REDIS_ERRORS = UNAVAILABLE_ERRORS


def connect(url: str, timeout_s: float = 5.0) -> redis.Redis:
    """A sync client with bounded timeouts, text replies (Redis, Sentinel or Cluster)."""
    return sync_client(url, ClientOptions(timeout_s=timeout_s, read_timeout_s=timeout_s))


def connect_async(url: str, timeout_s: float = 5.0) -> aioredis.Redis:
    return async_client(url, ClientOptions(timeout_s=timeout_s, read_timeout_s=timeout_s))


def _under_socket_timeout(r: redis.Redis | aioredis.Redis, timeout_s: float) -> float:
    sock = read_timeout_s(r)
    return min(timeout_s, sock / 2) if sock else timeout_s


def _unavailable(e: Exception) -> RedisUnavailable:
    return RedisUnavailable(f"Redis unavailable: {e}")


def _durable_commands(sha: str, call: Call[Any]) -> list[tuple[Any, ...]]:
    # One pipeline is one connection: WAIT counts the writes of the connection it is
    # sent on, so the writes and their WAIT must share one (and one round trip).
    wait = ("WAIT", call.replicas, call.replica_timeout_ms)
    if not call.script:
        return [*call.commands, wait]
    return [("EVALSHA", sha, len(call.keys), *call.keys, *call.args), wait]


def _acked(call: Call[Any], replies: list[Any]) -> Any:
    """The call's own reply, once WAIT (the last reply) counted enough replicas."""
    if int(replies[-1]) < call.replicas:
        raise NotReplicated(
            f"no replica confirmed the write within {call.replica_timeout_ms} ms "
            f"(queue.durability: replica); it may be on the primary alone: {call.unacked_hint}"
        )
    return replies[0] if call.script else replies[:-1]


def _pipeline_commands(scripts: dict[str, Any], call: Call[Any]) -> list[tuple[Any, ...]]:
    sha = scripts[call.script].sha if call.script else ""
    if call.replicas:
        return _durable_commands(sha, call)
    if call.script:
        return [("EVALSHA", sha, len(call.keys), *call.keys, *call.args)]
    return list(call.commands)


def _split(calls: Sequence[Call[Any]], sizes: list[int], flat: list[Any]) -> list[Any]:
    """A pipeline's replies, one share per call (each as ``_call_reply`` gives it)."""
    out, at = [], 0
    for call, n in zip(calls, sizes, strict=True):
        out.append(_call_reply(call, flat[at : at + n]))
        at += n
    return out


def _call_reply(call: Call[Any], replies: list[Any]) -> Any:
    """One call's share of a pipeline's replies, as ``run`` would hand it to its
    parser (an exception object in place of a failed script's reply)."""
    if call.script and isinstance(replies[0], Exception):
        return replies[0]
    errors = [rep for rep in replies if isinstance(rep, Exception)]
    if errors:
        return errors[0]
    if call.replicas:
        try:
            return _acked(call, replies)
        except NotReplicated as e:
            return e
    return replies[0] if call.script else replies


def _parsed(call: Call[Any], reply: Any) -> Any:
    if isinstance(reply, ResponseError) and slot_moving(reply):
        raise RedisUnavailable(f"Redis Cluster: this model's slot is moving: {reply}") from reply
    if isinstance(reply, REDIS_ERRORS):
        raise _unavailable(reply) from reply
    if isinstance(reply, Exception):
        raise reply
    return call.parse(reply)


REFRESH_S = 30.0  # how often a worker's client re-reads the partition high-water


def idem_lookup(
    ops: QueueOps, model: str, jobs: Sequence[NewJob], limits: dict[str, Any]
) -> Call[int] | None:
    """The round trip that finds where a keyed submit's key lives, when the model's
    partition count changed within the key's TTL (``Partitions.idem_lookup``); None
    when the submit names its partition or needs no lookup."""
    if limits.get("partition") is not None:
        return None
    owner = limits.get("owner")
    name = owner.name if owner is not None else ""
    fenced = limits.get("fence") is not None
    return ops.parts.idem_lookup(model, jobs, name, fenced, time.time())


def refuse_cluster_durability(cluster: bool, models: dict[str, ModelConfig]) -> None:
    """ConfigError when a model asks for replica durability on Redis Cluster."""
    durable = sorted(m for m, c in models.items() if c.queue.durability == "replica")
    if durable and cluster:
        raise ConfigError(
            f"models {', '.join(durable)}: queue.durability: replica is not supported on "
            "Redis Cluster (use primary, or Sentinel / a managed primary endpoint)"
        )


class QueueClient:
    """Synchronous protocol client (workers, CLI, benchmarks)."""

    def __init__(self, r: redis.Redis, models: dict[str, ModelConfig]) -> None:
        refuse_cluster_durability(is_cluster(r), models)
        self.redis = r
        self.ops = QueueOps(models)
        self._scripts = {n: r.register_script(script_source(n)) for n in SCRIPT_NAMES}
        # The partition high-water is read at the first claim, then every REFRESH_S.
        self._refreshed_at = -REFRESH_S

    def register(self, scripts: dict[str, str]) -> None:
        """More Lua scripts that this client's calls may name (sluice.bulk's)."""
        for name, source in scripts.items():
            if name not in self._scripts:
                self._scripts[name] = self.redis.register_script(source)

    def _run_durable(self, call: Call[Any]) -> Any:
        script = self._scripts[call.script] if call.script else None
        for first in (True, False):
            pipe = self.redis.pipeline(transaction=False)
            for cmd in _durable_commands(script.sha if script else "", call):
                pipe.execute_command(*cmd)
            try:
                replies = pipe.execute()
            except NoScriptError:
                if not first or script is None:
                    raise
                self.redis.script_load(script.script)  # nothing ran: safe to resend
                continue
            return _acked(call, replies)
        raise AssertionError("unreachable")

    def run(self, call: Call[T]) -> T:
        call = with_durability(call, self.ops.models)
        try:
            if call.replicas:
                reply: Any = self._run_durable(call)
            elif call.script:
                reply = self._scripts[call.script](keys=call.keys, args=call.args)
            else:
                pipe = self.redis.pipeline(transaction=False)
                for cmd in call.commands:
                    pipe.execute_command(*cmd)
                reply = pipe.execute()
        except REDIS_ERRORS as e:
            raise _unavailable(e) from e
        except ResponseError as e:
            if demoted(e):  # a durable call's WAIT on a replica: nothing was written
                forget_primary(self.redis)
                raise RedisUnavailable(DEMOTED) from e
            if slot_moving(e):
                raise RedisUnavailable(f"Redis Cluster: this model's slot is moving: {e}") from e
            raise
        return call.parse(reply)

    def run_all(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Several calls in one pipeline, one round trip, in order, not a transaction
        (another client's command may run between two of them); each call's parsed
        reply. A durable call's WAIT follows it in the same pipeline.

        A call whose script the server lacks (NOSCRIPT: it restarted or failed over)
        did not run: the scripts are loaded and the calls that failed are sent again,
        in order, in a second pipeline (ADR 0146). Any other error reply raises once
        every call has run."""
        calls = [with_durability(c, self.ops.models) for c in calls]
        try:
            replies = self._pipelined(calls)
            again = [i for i, rep in enumerate(replies) if isinstance(rep, NoScriptError)]
            if again:
                for name in {calls[i].script for i in again}:
                    self.redis.script_load(self._scripts[name].script)
                for i, rep in zip(again, self._pipelined([calls[i] for i in again]), strict=True):
                    replies[i] = rep
        except REDIS_ERRORS as e:
            raise _unavailable(e) from e
        if any(demoted(rep) for rep in replies):  # nothing written on a replica
            forget_primary(self.redis)
            raise RedisUnavailable(DEMOTED)
        return [_parsed(c, rep) for c, rep in zip(calls, replies, strict=True)]

    def _pipelined(self, calls: Sequence[Call[Any]]) -> list[Any]:
        pipe = self.redis.pipeline(transaction=False)
        sizes = []
        for call in calls:
            cmds = _pipeline_commands(self._scripts, call)
            sizes.append(len(cmds))
            for cmd in cmds:
                pipe.execute_command(*cmd)
        return _split(calls, sizes, pipe.execute(raise_on_error=False))

    def submit(self, model: str, jobs: Sequence[NewJob], **limits: Any) -> list[Submitted]:
        lookup = idem_lookup(self.ops, model, jobs, limits)
        if lookup is not None:  # a key maybe made under another partition count
            limits["partition"] = self.run(lookup)
        return self.run(self.ops.submit(model, jobs, **limits))

    def refresh_partitions(self) -> None:
        """Read (and raise to the configured counts) every model's partition
        high-water, so claims and readers visit partitions a larger count left."""
        self.ops.parts.refreshed(self.run(Call(list, commands=self.ops.parts.refresh_commands())))
        self._refreshed_at = time.monotonic()

    def claim(self, model: str, worker_id: str, **kw: Any) -> Batch:
        """A batch from the first partition that has one, in the worker's turn
        (``Partitions.claim_order``); empty only when every partition is. A partition
        whose shard is unavailable is passed over (its error raised only when no
        other partition had work), so one shard down does not stop the others."""
        parts = self.ops.parts
        if time.monotonic() - self._refreshed_at > REFRESH_S:
            self._refresh_quietly()
        if "partition" in kw or parts.span(model) == 1:
            return self.run(self.ops.claim(model, worker_id, **kw))
        tried: list[Batch] = []
        failed: RedisUnavailable | None = None
        for p in parts.claim_order(model, worker_id):
            try:
                tried.append(self.run(self.ops.claim(model, worker_id, partition=p, **kw)))
            except RedisUnavailable as e:
                failed = failed or e
                continue
            if tried[-1].jobs:
                parts.served(model, worker_id, p)
                return merged_claims(tried)
        if failed is not None:
            raise failed
        return merged_claims(tried)

    def _refresh_quietly(self) -> None:
        """The periodic high-water read; on failure the known one stays until next time."""
        try:
            self.refresh_partitions()
        except RedisUnavailable:
            self._refreshed_at = time.monotonic()

    def complete(
        self, model: str, outcomes: Sequence[Outcome], worker_id: str = ""
    ) -> tuple[int, int]:
        calls = self.ops.complete_calls(model, outcomes, worker_id)
        if len(calls) == 1:
            return self.run(calls[0])
        done = self.run_all(calls)
        return sum(d[0] for d in done), sum(d[1] for d in done)

    def renew(self, model: str, worker_id: str, job_ids: Sequence[str]) -> list[str]:
        calls = self.ops.renew_calls(model, worker_id, job_ids)
        if len(calls) == 1:
            return self.run(calls[0])
        return [lost for part in self.run_all(calls) for lost in part]

    def renew_why(self, model: str, worker_id: str, job_ids: Sequence[str]) -> dict[str, str]:
        """Renew; each id not renewed with why (``QueueOps.renew_why``), one call per
        partition the ids are in."""
        calls = self.ops.renew_why_calls(model, worker_id, job_ids)
        if len(calls) == 1:
            return self.run(calls[0])
        return {k: v for part in self.run_all(calls) for k, v in part.items()}

    def reclaim(self, model: str) -> int:
        return sum(self.run_all(self.ops.reclaim_calls(model)))

    def cancel(self, job_id: str, owner: str = "") -> str:
        return self.run(self.ops.cancel(job_id, owner))

    def wait_for_work(
        self,
        model: str,
        timeout_s: float,
        buckets: Sequence[str] | None = None,
        worker: str = "",
    ) -> bool:
        """Idle (after an empty claim): block, on this call's own pooled connection,
        until a served bucket's wake token arrives (True) or the timeout (False).
        With partitions, on the lists of the partition that is ``worker``'s turn
        (``Partitions.wait_partition``; without ``worker``, partition 0's).

        The wait is kept under half the socket timeout, so a quiet queue never
        reads as a dead connection.
        """
        timeout_s = _under_socket_timeout(self.redis, timeout_s)
        p = self.ops.parts.wait_partition(model, worker) if worker else 0
        return self.run(self.ops.wait_for_work(model, timeout_s, buckets, p))

    def get(self, job_id: str, model: str | None = None) -> JobRecord:
        return self.run(self.ops.get(job_id, model))

    def stats(self, model: str) -> QueueStats:
        if time.monotonic() - self._refreshed_at > REFRESH_S:
            self._refresh_quietly()
        return self.run(self.ops.stats(model))

    def dead_letters(self, model: str, limit: int = 100) -> list[str]:
        return self.run(self.ops.dead_letters(model, limit))


class AsyncQueueClient:
    """Asyncio protocol client (the gateway)."""

    def __init__(self, r: aioredis.Redis, models: dict[str, ModelConfig]) -> None:
        refuse_cluster_durability(is_cluster(r), models)
        self.redis = r
        self.ops = QueueOps(models)
        self._scripts = {n: r.register_script(script_source(n)) for n in SCRIPT_NAMES}

    def register(self, scripts: dict[str, str]) -> None:
        """More Lua scripts that this client's calls may name (sluice.bulk's)."""
        for name, source in scripts.items():
            if name not in self._scripts:
                self._scripts[name] = self.redis.register_script(source)

    async def _run_durable(self, call: Call[Any]) -> Any:
        script = self._scripts[call.script] if call.script else None
        for first in (True, False):
            pipe = self.redis.pipeline(transaction=False)
            for cmd in _durable_commands(script.sha if script else "", call):
                pipe.execute_command(*cmd)
            try:
                replies = await pipe.execute()
            except NoScriptError:
                if not first or script is None:
                    raise
                await self.redis.script_load(script.script)  # nothing ran: safe to resend
                continue
            return _acked(call, replies)
        raise AssertionError("unreachable")

    async def run(self, call: Call[T]) -> T:
        call = with_durability(call, self.ops.models)
        try:
            if call.replicas:
                reply: Any = await self._run_durable(call)
            elif call.script:
                reply = await self._scripts[call.script](keys=call.keys, args=call.args)
            else:
                pipe = self.redis.pipeline(transaction=False)
                for cmd in call.commands:
                    pipe.execute_command(*cmd)
                reply = await pipe.execute()
        except REDIS_ERRORS as e:
            raise _unavailable(e) from e
        except ResponseError as e:
            if demoted(e):  # a durable call's WAIT on a replica: nothing was written
                await forget_primary_async(self.redis)
                raise RedisUnavailable(DEMOTED) from e
            if slot_moving(e):
                raise RedisUnavailable(f"Redis Cluster: this model's slot is moving: {e}") from e
            raise
        return call.parse(reply)

    async def run_all(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """:meth:`QueueClient.run_all` on asyncio."""
        calls = [with_durability(c, self.ops.models) for c in calls]
        try:
            replies = await self._pipelined(calls)
            again = [i for i, rep in enumerate(replies) if isinstance(rep, NoScriptError)]
            if again:
                for name in {calls[i].script for i in again}:
                    await self.redis.script_load(self._scripts[name].script)
                resent = await self._pipelined([calls[i] for i in again])
                for i, rep in zip(again, resent, strict=True):
                    replies[i] = rep
        except REDIS_ERRORS as e:
            raise _unavailable(e) from e
        if any(demoted(rep) for rep in replies):  # nothing written on a replica
            await forget_primary_async(self.redis)
            raise RedisUnavailable(DEMOTED)
        return [_parsed(c, rep) for c, rep in zip(calls, replies, strict=True)]

    async def _pipelined(self, calls: Sequence[Call[Any]]) -> list[Any]:
        pipe = self.redis.pipeline(transaction=False)
        sizes = []
        for call in calls:
            cmds = _pipeline_commands(self._scripts, call)
            sizes.append(len(cmds))
            for cmd in cmds:
                pipe.execute_command(*cmd)
        return _split(calls, sizes, await pipe.execute(raise_on_error=False))

    async def submit(self, model: str, jobs: Sequence[NewJob], **limits: Any) -> list[Submitted]:
        lookup = idem_lookup(self.ops, model, jobs, limits)
        if lookup is not None:  # a key maybe made under another partition count
            limits["partition"] = await self.run(lookup)
        return await self.run(self.ops.submit(model, jobs, **limits))

    async def refresh_partitions(self) -> None:
        """:meth:`QueueClient.refresh_partitions` on asyncio."""
        cmds = self.ops.parts.refresh_commands()
        self.ops.parts.refreshed(await self.run(Call(list, commands=cmds)))

    async def claim(self, model: str, worker_id: str, **kw: Any) -> Batch:
        """:meth:`QueueClient.claim` on asyncio."""
        parts = self.ops.parts
        if "partition" in kw or parts.span(model) == 1:
            return await self.run(self.ops.claim(model, worker_id, **kw))
        tried: list[Batch] = []
        failed: RedisUnavailable | None = None
        for p in parts.claim_order(model, worker_id):
            try:
                tried.append(await self.run(self.ops.claim(model, worker_id, partition=p, **kw)))
            except RedisUnavailable as e:
                failed = failed or e
                continue
            if tried[-1].jobs:
                parts.served(model, worker_id, p)
                return merged_claims(tried)
        if failed is not None:
            raise failed
        return merged_claims(tried)

    async def complete(
        self, model: str, outcomes: Sequence[Outcome], worker_id: str = ""
    ) -> tuple[int, int]:
        calls = self.ops.complete_calls(model, outcomes, worker_id)
        if len(calls) == 1:
            return await self.run(calls[0])
        done = await self.run_all(calls)
        return sum(d[0] for d in done), sum(d[1] for d in done)

    async def renew(self, model: str, worker_id: str, job_ids: Sequence[str]) -> list[str]:
        calls = self.ops.renew_calls(model, worker_id, job_ids)
        if len(calls) == 1:
            return await self.run(calls[0])
        return [lost for part in await self.run_all(calls) for lost in part]

    async def reclaim(self, model: str) -> int:
        return sum(await self.run_all(self.ops.reclaim_calls(model)))

    async def cancel(self, job_id: str, owner: str = "") -> str:
        return await self.run(self.ops.cancel(job_id, owner))

    async def wait_for_work(
        self,
        model: str,
        timeout_s: float,
        buckets: Sequence[str] | None = None,
        worker: str = "",
    ) -> bool:
        timeout_s = _under_socket_timeout(self.redis, timeout_s)
        p = self.ops.parts.wait_partition(model, worker) if worker else 0
        return await self.run(self.ops.wait_for_work(model, timeout_s, buckets, p))

    async def get(self, job_id: str, model: str | None = None) -> JobRecord:
        return await self.run(self.ops.get(job_id, model))

    async def stats(self, model: str) -> QueueStats:
        return await self.run(self.ops.stats(model))

    async def dead_letters(self, model: str, limit: int = 100) -> list[str]:
        return await self.run(self.ops.dead_letters(model, limit))
