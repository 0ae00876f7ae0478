"""The worker process's batch loop: claim, run, complete; drain and quarantine.

Threads: the main thread runs batches; a housekeeping thread publishes
heartbeats, renews leases and takes control commands; with overlap on, one
prefetch thread claims and collates the next batch while the current one runs.
Drain, park and promote, and the parked worker's standby: workers/parking.py;
its state, start path and per-batch accounts: workers/reporting.py.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from redis.exceptions import RedisError

from sluice.backoff import Backoff, Reconnect
from sluice.config import POD_NAME_ENV, ModelConfig, SluiceConfig
from sluice.errors import RedisUnavailable
from sluice.jobs import Batch, Outcome
from sluice.queue import QueueClient
from sluice.registry import WorkerInfo
from workers.budget import BucketServiceMs, FailureStreak, ServiceRate, TokenBudget
from workers.execute import BatchResult, BatchRunner, warm_up
from workers.handlers.base import Collated, Handler, warmup_shapes
from workers.housekeeping import Housekeeper
from workers.metrics import WorkerMetrics
from workers.outcomes import COMPLETE_BACKOFF_S, send_outcomes
from workers.parking import Control, Standby
from workers.reporting import Reporting
from workers.startpath import StartPath
from workers.status import WorkerStatus
from workers.yielding import BulkYield, run_batch

log = logging.getLogger("sluice.worker")
EXIT_OK = 0
EXIT_QUARANTINED = 4
EXIT_LOAD_FAILED = 5
PARKED = -1  # the batch loop's return when a park command stopped it (never an exit code)
# An idle worker blocks on its buckets' wake lists (a submit pushes tokens) for at
# most this long, then claims anyway: that claim reclaims lapsed leases, and a
# drain or SIGTERM is acted on within this bound.
IDLE_WAIT_S = 0.5
# Claims after a Redis error: jittered backoff up to this (ADR 0065).
RECONNECT_MAX_S = 2.0
# After a batch failed as a whole, wait about this (doubling per failure in a row)
# before claiming again, so a healthy worker takes the requeued jobs (ADR 0066).
FAILED_BATCH_BACKOFF_S = 0.25


@dataclass(frozen=True)
class WorkerOptions:
    model: str
    device: str = "cpu"
    buckets: list[str] | None = None  # None: every bucket of the model
    worker_id: str | None = None
    overlap: bool | None = None  # None: the config's worker.overlap
    metrics_port: int | None = None  # None: the config's; -1: no endpoint
    burst: bool = False  # exit 0 once the queue is empty (benchmarks, tests)
    parked: bool = False  # a warm-pool worker: park once loaded, claim only when promoted
    start_path: StartPath | None = None  # the stages before the Worker (process, imports)


@dataclass
class _Fetched:
    batch: Batch
    collated: Collated | None


def new_worker_id() -> str:
    host = socket.gethostname().split(".")[0][:32] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(2)}"


def served_buckets(model_cfg: ModelConfig, wanted: list[str] | None) -> list[str]:
    names = model_cfg.bucket_names
    if not wanted:
        return names
    unknown = [b for b in wanted if b not in names]
    if unknown:
        raise ValueError(f"unknown bucket(s) {unknown}; this model has {names}")
    return [b for b in names if b in wanted]


def first_info(opts: WorkerOptions, buckets: list[str], now: float) -> WorkerInfo:
    """The worker's heartbeat record as it starts."""
    return WorkerInfo(
        id=opts.worker_id or new_worker_id(),
        model=opts.model,
        host=socket.gethostname(),
        pid=os.getpid(),
        device=opts.device,
        buckets=buckets,
        state="starting",
        started_at=now,
        pod_name=os.environ.get(POD_NAME_ENV, ""),
        parked=opts.parked,
    )


class Worker(Reporting):
    def __init__(
        self,
        config: SluiceConfig,
        client: QueueClient,
        handler: Handler,
        opts: WorkerOptions,
        *,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = config
        self.mcfg = config.model(opts.model)
        self.client, self.handler, self.opts, self.wall = client, handler, opts, wall
        self.model = opts.model
        self.buckets = served_buckets(self.mcfg, opts.buckets)
        wc = config.worker
        self.overlap = wc.overlap if opts.overlap is None else opts.overlap
        self.budget = TokenBudget(self.mcfg.batching.max_batch_tokens)
        self.rate, self.bucket_ms = ServiceRate(), BucketServiceMs()
        self.streak = FailureStreak(wc.quarantine_after_failures)
        self.metrics = WorkerMetrics(self.model)
        self.status = WorkerStatus(first_info(opts, self.buckets, wall()))
        self.runner = BatchRunner(handler, all_stopped=self.status.all_stopped)
        self.bulk_yield = BulkYield.of(self)  # bulk batches that yield (ADR 0155), or None
        self.start_path = opts.start_path or StartPath()
        self._first_claim_due: float | None = None  # monotonic: ready, no claim answered yet
        # Shared by the batch and prefetch threads: one log line per Redis outage.
        self.redis_retry = Reconnect(log, f"worker {self.id}", cap_s=RECONNECT_MAX_S)
        self.control = Control(self.id, self.status, self._set_state, parked=opts.parked)
        self.standby = Standby(
            self.control,
            client,
            handler,
            self._set_state,
            model=self.model,
            host_weights=self.mcfg.autoscaling.warm_pool.weights == "host",
            redis_retry=self.redis_retry,
        )
        self.housekeeper = Housekeeper(
            client,
            self.status,
            heartbeat_s=wc.heartbeat_s,
            ttl_s=wc.heartbeat_ttl_s,
            lease_s=self.mcfg.batching.lease_s,
            on_command=self.control.on_command,
            wall=wall,
            on_tick=self.control.stopping,
        )
        self._pool = ThreadPoolExecutor(1, "sluice-prefetch") if self.overlap else None
        self._metrics_server: object | None = None
        self.complete_backoff_s = COMPLETE_BACKOFF_S

    # -- lifecycle ------------------------------------------------------------
    def run(self) -> int:
        """Load, warm up, serve until drained (exit 0) or quarantined (exit 4).

        A warm-pool worker (``parked``) parks once loaded: state ``standby``, no
        claims, until a promote command; a park command sends a serving worker back
        there once its batch is done (docs/adr/0128)."""
        self.control.install_signals()
        self._start_metrics()
        self._set_state("starting")
        self.housekeeper.start()
        code = EXIT_OK
        try:
            t0 = time.monotonic()
            try:
                self._load()
            except Exception:
                log.exception("worker %s could not load or warm up its model", self.id)
                return EXIT_LOAD_FAILED
            self._report_loaded(time.monotonic() - t0)
            code = self._serve()
        finally:
            self._shutdown()
        log.info("worker %s exiting with code %d", self.id, code)
        return code

    def _serve(self) -> int:
        """Serve, standing by whenever parked, until stopped or quarantined."""
        code = EXIT_OK
        while not self.control.stopping():
            if self.control.parked and not self.standby.until_promoted(IDLE_WAIT_S):
                break
            self._first_claim_due = time.monotonic()
            self._set_state("ready")
            log.info("worker %s ready: claiming", self.id)
            code = self._loop()
            if code != PARKED:
                break
            code = EXIT_OK
        return code

    def _load(self) -> None:
        """The handler's load (split into its start stages) and the warm-up."""
        t0 = time.perf_counter()
        self.handler.load()
        load_s = time.perf_counter() - t0
        split = dict(self.handler.load_stages)
        for stage, seconds in split.items():
            self.start_path.add(stage, seconds)
        self.start_path.add("weights_read", load_s - sum(split.values()))
        with self.start_path.timed("warmup"):
            full = self.handler.warmup_full_batches()
            warm_up(self.handler, warmup_shapes(self.mcfg, self.buckets, full), self.budget)

    def drain(self, reason: str = "drain requested") -> None:
        """Stop claiming; the loop finishes what it holds and ``run`` returns 0."""
        self.control.drain(reason)

    def _shutdown(self) -> None:
        self.control.stop.set()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self.housekeeper.stop()
        try:
            self.housekeeper.deregister(self.model, self.id)
        except Exception as e:  # noqa: BLE001 - exiting anyway; the heartbeat TTL cleans up
            log.warning("could not deregister: %s", e)
        if self._metrics_server is not None:
            self._metrics_server.shutdown()  # type: ignore[attr-defined]
            self._metrics_server.server_close()  # type: ignore[attr-defined]
        self.handler.close()

    # -- the batch loop -------------------------------------------------------
    def _loop(self) -> int:
        """Batches until told to stop (EXIT_OK) or park (PARKED), or quarantined: take
        the prefetched batch or claim one, prefetch the next beside it, run it."""
        pending: Future[_Fetched | None] | None = None
        try:
            while True:
                if self.streak.tripped:
                    held, pending = pending, None
                    return self._quarantine(held)
                if pending is None and (end := self._told_to_end()) is not None:
                    return end
                prefetched, pending = pending, None
                fetched = self._next_batch(prefetched)
                if fetched is None:
                    if self.opts.burst and self._queue_empty():
                        return EXIT_OK
                    self._wait_for_work()
                    continue
                pending = self._prefetch(fetched)
                self._process(fetched)
                if self.streak.count and not self.streak.tripped:
                    held, pending = pending, None
                    self._after_failed_batch(held)
        finally:
            if pending is not None:  # left by an unexpected error: it never ran
                self._give_back(pending, "loop error")

    def _told_to_end(self) -> int | None:
        """Between batches: EXIT_OK when stopping, PARKED when parked, else None."""
        if self.control.stopping():
            return EXIT_OK
        if self.control.parked:
            return PARKED
        return None

    def _next_batch(self, prefetched: Future[_Fetched | None] | None) -> _Fetched | None:
        """The prefetched batch, else one claimed now (None: nothing to do)."""
        if prefetched is None:
            return self._fetch()
        fetched = self._result(prefetched)
        if fetched is None:
            # The prefetch takes no bulk items: found nothing else, claim again at
            # once, bulk allowed, instead of idling on the wake list.
            fetched = self._fetch()
        return fetched

    def _prefetch(self, fetched: _Fetched) -> Future[_Fetched | None] | None:
        """Claim the next batch while this one runs (with overlap on)."""
        if self._pool is None or self.control.held() or fetched.batch.bulk:
            # Prefetch only beside an interactive batch, and never a bulk one: a held
            # bulk batch (or a job held behind one) would make interactive jobs wait
            # out two bulk batches instead of going to the next free worker (ADR 0090).
            return None
        return self._pool.submit(self._fetch, False)

    def _after_failed_batch(self, pending: Future[_Fetched | None] | None) -> None:
        """This worker is suspect: hand back the prefetched batch (no attempt used)
        and wait before claiming again. Otherwise it takes its own requeued jobs
        straight back (they go back to the head of the queue) and burns their
        attempts into the dead-letter list before the streak quarantines it."""
        if pending is not None:
            self._give_back(pending, "the last batch failed")
        delay = Backoff(FAILED_BATCH_BACKOFF_S, cap_s=5.0, attempt=self.streak.count - 1).next_s()
        log.warning("batch failed (%d in a row); next claim in %.2f s", self.streak.count, delay)
        self.control.stop.wait(delay)

    def _result(self, pending: Future[_Fetched | None]) -> _Fetched | None:
        try:
            return pending.result()
        except Exception as e:  # noqa: BLE001 - a failed prefetch is only a missed batch
            log.warning("prefetch failed: %s", e)
            return None

    def _fetch(self, bulk: bool = True) -> _Fetched | None:
        """Claim one batch and collate it (in the prefetch thread when overlapping;
        a prefetch takes no bulk items)."""
        if self.control.held():
            return None
        try:
            batch = self.client.claim(
                self.model,
                self.id,
                buckets=self.buckets,
                max_batch_tokens=self.budget.current,
                service_ms=self.bucket_ms.ms or None,
                bulk=bulk,
            )
        except (RedisUnavailable, RedisError) as e:
            self.control.stop.wait(self.redis_retry.failed(e))
            return None
        self.redis_retry.ok()
        self._claim_answered()
        if not batch.jobs:
            return None
        self.status.hold([j.id for j in batch.jobs])
        if batch.bulk and self.bulk_yield is not None:
            return _Fetched(batch, None)  # its micro-batches collate as they run
        try:
            collated: Collated | None = self.handler.collate(
                [j.input for j in batch.jobs], [j.cost for j in batch.jobs]
            )
        except Exception:  # noqa: BLE001 - the runner retries item by item and records why
            collated = None
        return _Fetched(batch, collated)

    def _wait_for_work(self) -> None:
        """Idle: block until a submit's wake token (or IDLE_WAIT_S), then claim again.

        The blocked call holds its own pooled connection, so the housekeeping
        thread's heartbeats and renewals never queue behind it.
        """
        if self.control.held() or self.redis_retry.down:
            return  # Redis down: the failed claim has waited its backoff already
        try:
            self.client.wait_for_work(self.model, IDLE_WAIT_S, self.buckets, worker=self.id)
        except (RedisUnavailable, RedisError) as e:
            self.control.stop.wait(self.redis_retry.failed(e))

    def _queue_empty(self) -> bool:
        try:
            stats = self.client.stats(self.model)
        except (RedisUnavailable, RedisError):
            return False
        return sum(b.queued for b in stats.buckets if b.bucket in self.buckets) == 0

    def _process(self, f: _Fetched) -> None:
        batch = f.batch
        waits = [(batch.claimed_at_ms - j.enqueued_at_ms) / 1000 for j in batch.jobs]
        self.metrics.observe_waits(batch.bucket, waits)
        ran, released = batch, list[Outcome]()
        try:  # a bulk batch may stop between micro-batches, giving the rest back (ADR 0155)
            ran, result, released = run_batch(self.runner, self.bulk_yield, batch, f.collated)
        except Exception as e:  # noqa: BLE001 - a bug must not kill the worker holding leases
            log.exception("batch runner failed")
            msg = f"{type(e).__name__}: {e}"[:500]
            result = BatchResult(
                [Outcome.retry(j.id, "worker_error", msg) for j in batch.jobs], failed=True
            )
        # Jobs that ended while they ran (cancelled, past a limit) get no outcome: the
        # renewal saw them end, and their result would only be refused (ADR 0154).
        stopped = self.status.stopped([j.id for j in batch.jobs])
        self._complete([o for o in result.outcomes + released if o.id not in stopped])
        self.status.release([j.id for j in batch.jobs])
        self._account(ran, result)

    def _complete(self, outcomes: list[Outcome]) -> bool:
        """Send one batch's outcomes as their holder (retried ~10 s); False if it gave up."""
        # Before the send: a renewal answered while it is out (a replica-durable
        # completion waits for its WAIT) must not read these ended jobs as lost.
        self.status.ending([o.id for o in outcomes])
        return send_outcomes(self.client, self.model, self.id, outcomes, self.complete_backoff_s)

    def _quarantine(self, pending: Future[_Fetched | None] | None) -> int:
        log.error("worker %s quarantined after %d failed batches", self.id, self.streak.count)
        self.control.stop.set()
        self._set_state("quarantined")
        if pending is not None:
            self._give_back(pending, "worker quarantined")
        # The grace period keeps the quarantined heartbeat visible to operators and the
        # autoscaler before the worker disappears; a SIGTERM does not shorten it.
        time.sleep(max(0.0, self.cfg.worker.quarantine_grace_s))
        return EXIT_QUARANTINED

    def _give_back(self, pending: Future[_Fetched | None], reason: str) -> None:
        """Release a prefetched batch that never ran: requeued in its place with the
        claim's attempt undone, so a job on its last attempt is not dead-lettered."""
        fetched = self._result(pending)
        if fetched is None:
            return
        ids = [j.id for j in fetched.batch.jobs]
        log.info("handing back %d job(s) that never ran: %s", len(ids), reason)
        self._complete([Outcome.release(i) for i in ids])
        self.status.release(ids)
