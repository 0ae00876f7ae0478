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


def test_a_refresh_records_the_count_and_reads_every_member() -> None:
    p = _parts(3)
    cmds = p.refresh_commands(now_s=1000.0)
    k = keys.partitions_key("m")
    assert ("ZADD", k, "GT", 3, "n") in cmds and ("ZADD", k, "NX", 1000.0, "since") in cmds
    assert ("ZADD", k, "GT", 1000.0, "c3") in cmds
    writes = len(cmds) - len(p.models)
    flat = ["c3", "1000", "since", "900", "c2", "950", "n", "3"]  # RESP2, through a pipeline
    p.refreshed([1] * writes + [flat if m == "m" else [] for m in p.models])
    assert p.high_water["m"] == 3 and p.seen["m"] == {3: 1000.0, 2: 950.0, 1: 900.0}
    nested = [[b"n", 4.0], [b"c1", 1200.0]]  # RESP3 pairs, bytes
    p.refreshed([nested if m == "m" else [] for m in p.models])
    assert p.high_water["m"] == 4 and p.seen["m"] == {1: 1200.0}
    one = _parts(1)
    assert all(c[0] == "ZRANGE" for c in one.refresh_commands())  # never partitioned: reads
    one.high_water["m"] = 3
    assert ("ZADD", k, "GT", 5.0, "c1") in one.refresh_commands(now_s=5.0)  # once it was


def test_an_idempotency_lookup_only_within_the_key_ttl_of_another_count() -> None:
    p = _parts(3)
    ttl = p.models["m"].queue.idempotency_ttl_s
    keyed = [NewJob("x", "32", 1, idempotency_key=f"k{i}") for i in range(12)]
    assert p.idem_lookup("m", keyed[:1], "a", False, 0.0) is None  # nothing seen yet
    p.seen["m"] = {3: 10_000.0, 2: 9_000.0}
    calls = [p.idem_lookup("m", [j], "a", False, 10_000.0) for j in keyed]
    looked = [c for c in calls if c is not None]
    assert looked and len(looked) < len(keyed)  # only keys whose partition differs
    call = looked[0]
    assert len(call.commands) == 2 and all(c[0] == "GET" for c in call.commands)
    # its own partition first: where the key is found, else its own
    assert call.parse(["m.x", None]) == call.parse([None, None]) != call.parse([None, "m.x"])
    late = 9_000.0 + ttl + 121
    assert all(p.idem_lookup("m", [j], "a", False, late) is None for j in keyed)
    assert p.idem_lookup("m", keyed[:1], "a", True, 10_000.0) is None  # fenced: partition 0
