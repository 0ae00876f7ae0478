"""A worker's control: drain, park and promote (docs/adr/0128), and the standby wait.

Commands reach a worker on its control list (read by the housekeeping thread, or
by the standby wait while parked), as SIGTERM/SIGINT, or from the worker itself
(quarantine). The batch loop reads two flags from :class:`Control` between
batches:

1. ``stop`` (drain or quarantine): claim nothing more, finish what it holds, exit;
2. ``parked``: finish this batch, then stand by until a promote (or a drain).

:class:`Standby` is the parked worker: state ``standby``, heartbeating (the
housekeeping thread does that), claiming nothing, blocked on its control list.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable

from redis.exceptions import RedisError

from sluice import keys
from sluice.backoff import Reconnect
from sluice.errors import RedisUnavailable
from sluice.queue import QueueClient
from sluice.registry import DRAIN, PARK, PROMOTE
from workers.handlers.base import Handler
from workers.status import WorkerStatus

log = logging.getLogger("sluice.worker")
# The worker's: (state, publish=True, **status changes); publishing is a heartbeat.
SetState = Callable[..., None]


class Control:
    """The stop and parked flags, what sets them, and when a promotion came."""

    def __init__(
        self, worker_id: str, status: WorkerStatus, set_state: SetState, *, parked: bool
    ) -> None:
        self.worker_id, self.status, self._set_state = worker_id, status, set_state
        self.stop = threading.Event()  # stop claiming: drain or quarantine
        self._parked = threading.Event()  # park once loaded / after this batch
        if parked:
            self._parked.set()
        self._signalled = ""  # set by the signal handler, acted on by the threads
        self._promoted_at: float | None = None  # monotonic: when the promote command came

    @property
    def parked(self) -> bool:
        return self._parked.is_set()

    def stopping(self) -> bool:
        """Told to stop (a pending signal becomes a drain here, outside its handler)."""
        if self._signalled and not self.stop.is_set():
            self.drain(self._signalled)
        return self.stop.is_set()

    def held(self) -> bool:
        """Stopping or parked: claim nothing now."""
        return self.stopping() or self.parked

    def drain(self, reason: str) -> None:
        if not self.stop.is_set():
            log.info("worker %s draining: %s", self.worker_id, reason)
            if self.status.state != "quarantined":
                self._set_state("draining", publish=False)
            self.stop.set()

    def install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        # Runs between any two bytecodes of the main thread, maybe while it holds a
        # lock, so it only sets a plain attribute; the threads act on it.
        self._signalled = signal.Signals(signum).name

    def on_command(self, command: str) -> None:
        """One command from the control list (``sluice.registry.send_control``)."""
        if command == DRAIN:
            self.drain("drain command")
        elif command == PROMOTE:
            if self._parked.is_set():
                if self.status.state == "standby":  # promoted while loading: a start
                    self._promoted_at = time.monotonic()
                self._parked.clear()
                self.status.update(parked=False)
                log.info("worker %s promoted", self.worker_id)
        elif command == PARK:
            if not self._parked.is_set() and not self.stop.is_set():
                log.info("worker %s parking once its batch is done", self.worker_id)
                self._parked.set()
                self.status.update(parked=True)
        else:
            log.warning("ignoring unknown control command %r", command)

    def take_promoted_at(self) -> float | None:
        """When the promote command came (monotonic), once; None if not promoted."""
        promoted_at, self._promoted_at = self._promoted_at, None
        return promoted_at


class Standby:
    """A parked worker's wait for a promotion, its weights in host memory meanwhile
    when ``host_weights`` (warm_pool.weights: host)."""

    def __init__(
        self,
        control: Control,
        client: QueueClient,
        handler: Handler,
        set_state: SetState,
        *,
        model: str,
        host_weights: bool,
        redis_retry: Reconnect,
    ) -> None:
        self.control, self.client, self.handler = control, client, handler
        self._set_state, self.model, self.host_weights = set_state, model, host_weights
        self.redis_retry = redis_retry

    def until_promoted(self, wait_s: float) -> bool:
        """Standby: heartbeat, claim nothing, wait on the control list (at most
        ``wait_s`` a call) for a promote or a drain. False when the worker is to stop."""
        worker_id = self.control.worker_id
        if self.host_weights:
            t0 = time.perf_counter()
            self.handler.park()  # weights to host memory (a GPU handler; else nothing)
            log.info(
                "worker %s: weights parked in host memory in %.2f s",
                worker_id,
                time.perf_counter() - t0,
            )
        self._set_state("standby", parked=True)
        log.info("worker %s parked (standby): waiting to be promoted", worker_id)
        control = keys.worker_control_key(self.model, worker_id)
        while self.control.parked and not self.control.stopping():
            try:
                reply = self.client.redis.blpop([control], timeout=wait_s)
            except (RedisUnavailable, RedisError) as e:
                self.control.stop.wait(self.redis_retry.failed(e))
                continue
            self.redis_retry.ok()
            if reply:  # (key, command); the client decodes replies to str
                self.control.on_command(str(reply[1]))
        if self.control.stopping():
            return False
        if self.host_weights:
            self.handler.unpark()  # inside promote_s: the command's clock is running
        return True
