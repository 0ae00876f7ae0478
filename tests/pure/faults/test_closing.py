"""A stopping gateway ends its long-polls at once (no Redis needed for this part)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.waiters import JobWaiters
from sluice.errors import ShuttingDown


async def test_close_ends_every_waiter_now_and_every_later_one() -> None:
    c = JobWaiters(None, [])  # type: ignore[arg-type]  # no Redis: only the waiters
    with c.waiter("m.a") as a, c.waiter("m.b") as b:
        assert c.close() == 2
        for fut in (a, b):
            with pytest.raises(ShuttingDown):
                await asyncio.wait_for(fut, 1)
    assert c.waiting == 0
    with c.waiter("m.c") as late:  # registered while stopping: already over
        assert late.done() and isinstance(late.exception(), ShuttingDown)
