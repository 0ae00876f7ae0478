"""``bulk.idle_reserve`` (ADR 0164), the claim script's decision, on fakeredis: a
bulk batch goes to a worker only while at least that many *other* serving workers
hold no batch, interactive or bulk (capped at the other serving workers there are),
once an interactive job was claimed lately; held back only for that reason."""

from __future__ import annotations

import time

import fakeredis
from hypothesis import given
from hypothesis import strategies as st

from sluice import registry
from sluice.jobs import BULK, NewJob
from sluice.queue import QueueClient
from tests.conftest import budget, make_config
from tests.factories import worker_info

WORKERS = ["w0", "w1", "w2", "w3"]
# (worker, what): "claim" (bulk allowed), "prefetch" (bulk=False, beside a batch it
# still runs), "submit" (an interactive job arrives).
STEP = st.tuples(st.sampled_from(WORKERS), st.sampled_from(["claim", "prefetch", "submit"]))


def stack(reserve: int) -> tuple[fakeredis.FakeRedis, QueueClient]:
    r = fakeredis.FakeRedis(decode_responses=True)
    q = QueueClient(r, dict(make_config(bulk={"idle_reserve": reserve, "max_batch": 2}).models))
    for wid in WORKERS:
        info = worker_info(id=wid, buckets=[], state="ready", started_at=time.time())
        for cmd in registry.heartbeat(info, 30):
            r.execute_command(*cmd)
    items = [
        NewJob(input="x", bucket="32", cost=10, priority=BULK, id=f"m.bulk1-{i}")
        for i in range(200)
    ]
    q.submit("m", items)
    return r, q


# Each example runs up to 30 claim scripts in fakeredis's Lua: a tenth of the budget.
@budget(0.1, deadline=None)
@given(reserve=st.integers(1, 4), steps=st.lists(STEP, max_size=30))
def test_bulk_goes_only_where_the_reserve_stays_idle(
    reserve: int, steps: list[tuple[str, str]]
) -> None:
    r, q = stack(reserve)
    holds = dict.fromkeys(WORKERS, False)  # the model: holds a batch since its last claim
    interactive = 0
    served = False  # an interactive job claimed lately: before that, no reserve
    for wid, what in steps:
        if what == "submit":
            q.submit("m", [NewJob(input="x", bucket="32", cost=10, priority="normal")])
            interactive += 1
            continue
        idle_others = sum(not h for w, h in holds.items() if w != wid)
        room = not served or idle_others >= min(reserve, len(WORKERS) - 1)
        batch = q.claim("m", wid, bulk=what == "claim")
        # Capped at the other serving workers: with 4 workers, a reserve of 4 is 3.
        if batch.bulk:
            assert what == "claim" and room
        elif batch.jobs:
            interactive -= len(batch.jobs)
            served = True
        elif what == "claim":
            assert interactive == 0 and not room  # held back by the reserve only
        holds[wid] = bool(batch.jobs) or what == "prefetch"
