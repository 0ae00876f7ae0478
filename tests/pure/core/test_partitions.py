"""Which partition a call goes to (sluice/queue/partitions.py, docs/adr/0159)."""

from __future__ import annotations

from sluice import keys
from sluice.jobs import NewJob, Owner, model_of, new_job_id
from sluice.queue.partitions import Partitions
from tests.factories import sluice_config


def _parts(n: int) -> Partitions:
    return Partitions(dict(sluice_config({"queue": {"partitions": n}}).models))


def test_ids_carry_their_partition_and_old_ids_are_partition_zero() -> None:
    assert keys.partition_of(new_job_id("m")) == 0
    assert keys.partition_of(new_job_id("m", 7)) == 7 and model_of(new_job_id("m", 7)) == "m"
    assert keys.partition_of("m.bulk0a1b-3") == 0  # a bulk item's id
    assert keys.stats_key("m") == "sluice:{m}:stats"  # partition 0: today's names
    assert keys.stats_key("m", 2) == "sluice:{m~2}:stats"


def test_submits_go_round_robin_per_owner_and_by_idempotency_key() -> None:
    p = _parts(3)
    job = NewJob("x", "32", 1)
    assert sorted(p.for_submit("m", [job], "a", False) for _ in range(6)) == [0, 0, 1, 1, 2, 2]
    keyed = NewJob("x", "32", 1, idempotency_key="k")
    assert len({p.for_submit("m", [keyed], "a", False) for _ in range(5)}) == 1
    assert p.for_submit("m", [job], "a", True) == 0  # fenced: bulk lives in partition 0
    assert p.for_submit("m", [NewJob("x", "32", 1, id="m.2~ab")], "", False) == 2


def test_shares_and_claim_order() -> None:
    p = _parts(3)
    s = p.shares("m", 10, 0, Owner("a", max_unfinished=4, rate_per_s=9.0, burst=5))
    assert (s.max_jobs, s.max_cost, s.owner_max, s.rate, s.burst) == (4, 0, 2, 3.0, 2)
    order = p.claim_order("m", "w")
    assert sorted(order) == [0, 1, 2]
    p.served("m", "w", order[0])
    assert p.claim_order("m", "w")[0] == (order[0] + 1) % 3
    p.high_water["m"] = 5  # a larger count left jobs: claims visit them too
    assert sorted(p.claim_order("m", "w")) == [0, 1, 2, 3, 4]
