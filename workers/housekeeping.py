"""The worker's background thread: heartbeats, lease renewal, control commands.

It ticks every ``min(heartbeat_s, lease_s / 3)`` seconds so a lease is renewed
at least twice before it could expire, even while one long batch holds the
main thread. A failed Redis round trip (any RedisError: connection lost, OOM
under maxmemory, READONLY during a failover) is logged and retried next tick,
never faster than the period and never slower (a lease must be renewed as soon
as Redis takes writes again); nothing a tick raises ends the thread, since
leases, heartbeats and drain commands all depend on it. The batch loop never
waits on this thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from redis.exceptions import RedisError, ResponseError

from sluice import keys, registry
from sluice.backoff import Outage
from sluice.errors import RedisUnavailable
from sluice.queue import QueueClient
from sluice.queue.client import REDIS_ERRORS
from sluice.records import LEASE_LOST
from workers.status import WorkerStatus

log = logging.getLogger("sluice.worker")
LOST_KEPT = 1000  # ids of recently lost leases remembered (a worker runs for months)


class Housekeeper:
    def __init__(
        self,
        client: QueueClient,
        status: WorkerStatus,
        *,
        heartbeat_s: float,
        ttl_s: float,
        lease_s: float,
        on_command: Callable[[str], None],
        wall: Callable[[], float] = time.time,
        on_tick: Callable[[], object] | None = None,
    ) -> None:
        self.client = client
        self.status = status
        self.ttl_s = max(ttl_s, heartbeat_s * 2)
        self.period_s = max(0.05, min(heartbeat_s, lease_s / 3))
        self.on_command = on_command
        self.on_tick = on_tick
        self.wall = wall
        self.lost: deque[str] = deque(maxlen=LOST_KEPT)
        self.outage = Outage("housekeeping")  # one log line per outage, not per tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sluice-housekeeping", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - this thread must outlive any one tick
                log.exception("housekeeping tick failed; carrying on")
            self._stop.wait(self.period_s)

    def tick(self) -> None:
        if self.on_tick is not None:
            self.on_tick()
        errors: list[Exception] = []
        # Apart: Redis refusing writes (OOM) fails the renewal, yet the control
        # poll in the heartbeat round trip still takes a drain command.
        for step in (self.renew, self.beat):
            try:
                step()
            except (RedisUnavailable, RedisError, *REDIS_ERRORS) as e:
                errors.append(e)
        self._log_health(errors)

    def _log_health(self, errors: list[Exception]) -> None:
        # The tick period stays fixed through an outage (no backoff): a lease must be
        # renewed as soon as Redis takes writes again, and one tick is cheap.
        now = time.monotonic()
        msg = self.outage.failed(now, errors[0]) if errors else self.outage.recovered(now)
        if msg:
            log.warning(msg)

    @property
    def failures(self) -> int:
        """Consecutive failed ticks (0 while Redis answers)."""
        return self.outage.failures

    def renew(self) -> None:
        info = self.status.snapshot()
        held = self.status.held()
        if not held:
            return
        why = self.client.renew_why(info.model, info.id, held)
        # A job this worker completed while the renewal was on its way is not lost:
        # its completion was marked before it was sent (or it was released since),
        # and both are read after the reply, not before the call.
        lost = self.status.lost_of([j for j, w in why.items() if w == LEASE_LOST])
        if lost:
            self.lost.extend(lost)
            log.warning("lost the lease of %d job(s); they may run elsewhere", len(lost))
        # Ended under this worker (cancelled, past the deadline or max_run_ms): the
        # batch loop's handler stops computing them at its next check (ADR 0154).
        ended = {j: w for j, w in why.items() if w != LEASE_LOST}
        for job_id in self.status.stop(list(ended)):
            log.info("job %s ended while it ran (%s): stopping it", job_id, ended[job_id])

    def beat(self) -> None:
        """Publish one heartbeat and take (and act on) one control command, in one
        round trip; raises the first error if Redis refused the heartbeat's writes."""
        now = self.wall()
        info = self.status.update(heartbeat_at=now)
        pipe = self.client.redis.pipeline(transaction=False)
        for cmd in registry.heartbeat(info, self.ttl_s):
            pipe.execute_command(*cmd)
        pipe.execute_command(*registry.poll_control(info.model, info.id))
        replies = pipe.execute(raise_on_error=False)
        command = replies[-1]
        if isinstance(command, ResponseError):
            # Someone wrote a plain string instead of the list; accept it too.
            command = self.client.redis.getdel(keys.worker_control_key(info.model, info.id))
        if isinstance(command, str) and command:
            self.on_command(command)  # popped already: act on it even if the beat failed
        refused = [x for x in replies[:-1] if isinstance(x, Exception)]
        if refused:
            raise refused[0]

    def deregister(self, model: str, worker_id: str) -> None:
        pipe = self.client.redis.pipeline(transaction=False)
        for cmd in registry.deregister(model, worker_id):
            pipe.execute_command(*cmd)
        pipe.delete(keys.worker_control_key(model, worker_id))
        pipe.execute()
