"""Sending a batch's outcomes to Redis: retried through short outages, never fatal.

The worker must not die holding jobs, and a Redis restart should not cost a
finished batch: any Redis error (connection lost, OOM under maxmemory, READONLY
during a failover) is retried for about 10 s while the housekeeping thread keeps
renewing the leases. After that the leases lapse and the jobs run again
elsewhere (at least once, an attempt used).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from redis.exceptions import RedisError

from sluice import fastjson
from sluice.errors import NotReplicated, RedisUnavailable
from sluice.jobs import Outcome
from sluice.queue import QueueClient

log = logging.getLogger("sluice.worker")
# Waits between tries (about 10 s in all); then it gives up and logs the job ids.
COMPLETE_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 2.0, 2.0, 2.0)


def serialisable(o: Outcome) -> Outcome:
    """The outcome itself, or a failure if its result cannot be stored as JSON."""
    try:
        fastjson.dumps(o.payload)  # what the complete call will store
        return o
    except (TypeError, ValueError) as e:
        return Outcome.fail(o.id, "result_not_json", str(e)[:500], o.run_ms)


def _say_stale(stale: int, earlier: Exception | None) -> None:
    if isinstance(earlier, NotReplicated):
        # The earlier try ran on the primary (only its replica wait timed out), so this
        # resend finds its own jobs ended: no lease was lost, nothing ran twice.
        log.info("%d outcome(s) already applied by the try whose replica wait timed out", stale)
        return
    # The renewal may not have seen it (the batch ended first): say it here.
    log.warning(
        "%d outcome(s) stale, not applied: the lease was lost and the job ran elsewhere or ended",
        stale,
    )


def send_outcomes(
    client: QueueClient,
    model: str,
    worker_id: str,
    outcomes: list[Outcome],
    delays: Sequence[float] = COMPLETE_BACKOFF_S,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Send one batch's outcomes as their holder; False if it gave up."""
    error: Exception | None = None
    said = False
    for delay in (*delays, None):
        try:
            # As the holder: a retry/fail/release after our lease lapsed and
            # another worker took the job is counted stale, not applied.
            _, stale = client.complete(model, outcomes, worker_id=worker_id)
            if stale:
                _say_stale(stale, error)
            return True
        except (TypeError, ValueError) as e:
            error, outcomes = e, [serialisable(o) for o in outcomes]  # then again
        except (RedisUnavailable, RedisError) as e:
            error = e
            if delay is not None:
                if not said:  # once per batch, not per try
                    said = True
                    log.warning(
                        "could not send %d outcome(s), retrying for up to %.0f s: %s",
                        len(outcomes),
                        sum(delays),
                        e,
                    )
                sleep(delay)
    ids = " ".join(o.id for o in outcomes)
    log.error(
        "gave up sending %d outcome(s) after %d tries (%s); jobs: %s",
        len(outcomes),
        len(delays) + 1,
        error,
        ids,
    )
    return False
