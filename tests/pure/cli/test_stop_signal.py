"""A stop signal landing while the main thread waits on the stop Event never deadlocks."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest

from sluice.cli_common import stop_event_on_signals


@pytest.fixture
def restore_handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def test_signal_inside_event_wait_sets_the_event_without_deadlock(restore_handlers: None) -> None:
    stop = stop_event_on_signals()
    handler = signal.getsignal(signal.SIGTERM)
    assert callable(handler)

    def main_thread_in_wait() -> None:
        # What Event.wait does between timeouts: hold the Event's own lock. A handler
        # calling stop.set() right here (as `lambda *_: stop.set()` did) never returns:
        # `sluice redis` hung on SIGTERM in CI this way.
        with stop._cond:  # type: ignore[attr-defined]
            handler(signal.SIGTERM, None)

    t = threading.Thread(target=main_thread_in_wait, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "the signal handler deadlocked on the Event's lock"
    assert stop.wait(5)
