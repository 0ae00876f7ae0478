"""The generative worker process: the batch worker's lifecycle around the slot loop.

Everything but the loop is the batch worker's (workers/worker.py): load and start
path, heartbeat and lease renewal (the housekeeping thread), control commands,
SIGTERM as a drain, parking for warm pools (a parked generative worker has loaded
its model and warmed its engine, and claims nothing), the metrics endpoint,
quarantine. What differs:

1. ``_load`` builds the engine (``EngineHandler.load``) and runs one short
   sequence through it instead of batch-shape warm-ups;
2. ``_loop`` drives :class:`workers.generate.loop.SlotLoop` turns: claim into
   free slots while serving; draining or parked, claim nothing and finish the
   sequences in slots (each ends within its ``max_tokens``), then stop or park;
3. an idle turn (nothing in slots, nothing claimed) blocks on the queue's wake
   list (``wait_for_work``) instead of spinning;
4. the loop leaving on an error hands its sequences back (``release``: requeued,
   the attempt undone) so another worker runs them; an engine step that raises
   retries its jobs and counts toward quarantine like a failed batch.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from sluice.backoff import Backoff
from sluice.config import GenerateConfig, SluiceConfig
from sluice.queue import QueueClient
from workers.generate.handler import EngineHandler
from workers.generate.loop import SlotLoop, StepFn, Turn
from workers.generate.metrics import GenerateMetrics
from workers.worker import EXIT_OK, FAILED_BATCH_BACKOFF_S, PARKED, Worker, WorkerOptions

log = logging.getLogger("sluice.worker")


class GenerativeWorker(Worker):
    """A worker whose model has a ``generate:`` section: slots, not batches."""

    def __init__(
        self,
        config: SluiceConfig,
        client: QueueClient,
        handler: EngineHandler,
        opts: WorkerOptions,
        *,
        wall: Callable[[], float] = time.time,
        step: StepFn | None = None,
    ) -> None:
        # No prefetch thread: the slot loop claims in its own round trip.
        super().__init__(
            config, client, handler, dataclasses.replace(opts, overlap=False), wall=wall
        )
        gen = self.mcfg.generate
        if gen is None:
            raise ValueError(f"model {self.model!r} has no generate: section")
        self.gen: GenerateConfig = gen
        self.engine_handler = handler
        self.gen_metrics = GenerateMetrics(self.model, self.metrics.registry, gen.slots)
        self.status.update(slots=gen.slots)
        self._step_fn = step
        self.slots: SlotLoop | None = None

    def _load(self) -> None:
        t0 = time.perf_counter()
        self.engine_handler.load()
        load_s = time.perf_counter() - t0
        split = dict(self.engine_handler.load_stages)
        for stage, seconds in split.items():
            self.start_path.add(stage, seconds)
        self.start_path.add("weights_read", load_s - sum(split.values()))
        with self.start_path.timed("warmup"):
            self.engine_handler.warm_up_engine()
        engine = self.engine_handler.loaded_engine()
        kw = {} if self._step_fn is None else {"step": self._step_fn}
        self.slots = SlotLoop(
            engine,
            self.client,
            self.model,
            self.id,
            self.gen,
            buckets=self.buckets,
            metrics=self.gen_metrics,
            status=self.status,
            **kw,  # type: ignore[arg-type]
        )
        self.status.update(slots=engine.slots)

    # -- the slot loop --------------------------------------------------------
    def _loop(self) -> int:
        """Turns until stopped (EXIT_OK) or parked (PARKED) with empty slots, or
        quarantined after repeated engine failures."""
        slots = self.slots
        assert slots is not None, "_load builds the slot loop"
        try:
            while True:
                if self.streak.tripped:
                    return self._quarantine(None)
                held = self.control.held()
                if held and not slots.busy:
                    return EXIT_OK if self.control.stopping() else PARKED
                turn = slots.turn(claim=not held)
                self._after_turn(turn)
        finally:
            if slots.busy:  # left by an unexpected error or quarantine: run elsewhere
                slots.hand_back("the slot loop stopped")

    def _after_turn(self, turn: Turn) -> None:
        if turn.error is None:
            self._claim_answered()  # the first after ready: the start path's last stage
        if turn.engine_failed:
            self.streak.record(True)
            delay = Backoff(FAILED_BATCH_BACKOFF_S, cap_s=5.0, attempt=self.streak.count - 1)
            self.control.stop.wait(delay.next_s())
            return
        if turn.stepped:
            self.streak.record(False)
        if turn.error is not None:
            self.control.stop.wait(self.redis_retry.failed(turn.error))
            return
        self.redis_retry.ok()
        if turn.ended:
            self._count(turn)
        if turn.idle and not self.control.held():
            if self.opts.burst and self._queue_empty():
                self.control.drain("burst: the queue is empty")
                return
            self._wait_for_work()

    def _count(self, turn: Turn) -> None:
        info = self.status.snapshot()
        self.status.update(jobs=info.jobs + turn.ended, batches=info.batches + 1)
