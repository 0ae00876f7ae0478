"""Bulk that yields (ADR 0155), without a server: the micro-batch loop, the merge of
its results, and the probe's reading of the queues (fakeredis)."""

from __future__ import annotations

from typing import Any

import fakeredis
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from sluice import keys
from sluice.jobs import Batch, ClaimedJob
from sluice.records import BULK_RANK, SCORE_SCALE
from tests.factories import sluice_config
from workers.execute import BatchResult, BatchRunner
from workers.handlers.base import Collated, Handler, HandlerContext
from workers.yielding import BulkYield, InteractiveProbe, merge, run_yielding


class Recorder(Handler):
    """Echoes its inputs; records each call's inputs; fails on an input ``"boom"``."""

    def __init__(self) -> None:
        super().__init__(HandlerContext("m", sluice_config().model("m")))
        self.calls: list[list[Any]] = []

    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        return Collated(list(inputs), len(inputs), 0, 0)

    def infer(self, batch: Collated) -> Any:
        self.calls.append(batch.data)
        if "boom" in batch.data:
            raise RuntimeError("device lost")
        return batch.data

    def postprocess(self, output: Any, batch: Collated) -> list[Any]:
        return list(output)


def jobs(n: int) -> list[ClaimedJob]:
    return [ClaimedJob(f"b{i}", f"x{i}", 1, 1, 0) for i in range(n)]


@given(
    n=st.integers(1, 20),
    micro=st.integers(1, 8),
    answers=st.lists(st.booleans(), max_size=25),
)
def test_runs_in_micro_batches_and_gives_back_exactly_what_never_ran(
    n: int, micro: int, answers: list[bool]
) -> None:
    h = Recorder()
    asked = iter(answers)
    got = run_yielding(BatchRunner(h), jobs(n), micro, lambda rest: next(asked, False))
    ids = [j.id for j in jobs(n)]
    # Every job either ran or went back, in order, none twice: the ran ones are a prefix.
    assert [j.id for j in got.ran] + [j.id for j in got.left] == ids
    assert [o.id for o in got.result.outcomes] == [j.id for j in got.ran]
    assert all(o.kind == "ok" for o in got.result.outcomes)
    assert [o.kind for o in got.releases] == ["release"] * len(got.left)
    # Handler calls of at most `micro` items; the first always runs (the claim is not wasted).
    assert all(1 <= len(c) <= micro for c in h.calls) and len(h.calls[0]) == min(micro, n)
    # It stops at the first yes, and only asks between two calls.
    asks = len(h.calls) - 1 + (1 if got.left else 0)
    assert True not in answers[: len(h.calls) - 1]
    assert bool(got.left) == (asks > 0 and answers[asks - 1 : asks] == [True])


def test_a_failed_micro_batch_stops_the_batch_and_the_rest_go_back_unrun() -> None:
    h = Recorder()
    js = jobs(6)
    js[2], js[3] = ClaimedJob("b2", "boom", 1, 1, 0), ClaimedJob("b3", "boom", 1, 1, 0)
    got = run_yielding(BatchRunner(h), js, 2, lambda rest: False)
    assert [j.id for j in got.ran] == ["b0", "b1", "b2", "b3"]
    assert [j.id for j in got.left] == ["b4", "b5"]  # not into a worker that just failed
    kinds = {o.id: o.kind for o in got.result.outcomes}
    assert kinds == {"b0": "ok", "b1": "ok", "b2": "retry", "b3": "retry"}
    assert not got.result.failed  # one micro-batch of two failed, not the batch


def test_a_poison_input_fails_alone_and_the_batch_runs_on() -> None:
    js = jobs(4)
    js[1] = ClaimedJob("b1", "boom", 1, 1, 0)
    got = run_yielding(BatchRunner(Recorder()), js, 2, lambda rest: False)
    assert got.left == []
    kinds = {o.id: o.kind for o in got.result.outcomes}
    assert kinds == {"b0": "ok", "b1": "fail", "b2": "ok", "b3": "ok"}


def test_merge_fails_only_if_every_micro_batch_failed() -> None:
    ok = BatchResult([], infer_s=0.5, padded_tokens=3, real_tokens=2, errors={"E": 1})
    bad = BatchResult([], failed=True, infer_s=0.25, oom_splits=1, errors={"E": 2, "F": 1})
    m = merge([ok, bad])
    assert not m.failed and m.infer_s == 0.75 and m.oom_splits == 1
    assert (m.padded_tokens, m.real_tokens, m.errors) == (3, 2, {"E": 3, "F": 1})
    assert merge([bad, bad]).failed and not merge([]).failed


def test_the_probe_sees_interactive_jobs_only_in_served_buckets() -> None:
    r = fakeredis.FakeRedis()
    probe = InteractiveProbe(r, "m", ["32", "128"])
    r.zadd(keys.queue_key("m", "32"), {"bulk": BULK_RANK * SCORE_SCALE + 1})
    r.zadd(keys.queue_key("m", "512"), {"elsewhere": 5})  # a bucket not served
    r.zadd(keys.queue_key("other", "128"), {"other model": 5})
    assert not probe.waiting()
    r.zadd(keys.queue_key("m", "128"), {"low": 2 * SCORE_SCALE + 7})  # rank 2: low
    assert probe.waiting()


def test_bulk_yield_counts_what_it_gave_back_and_keeps_running_if_redis_fails() -> None:
    r = fakeredis.FakeRedis()
    reg = CollectorRegistry()
    y = BulkYield(InteractiveProbe(r, "m", ["32"]), 2, reg)
    batch = Batch("m", "32", 0, jobs(6))
    r.zadd(keys.queue_key("m", "32"), {"i": 1})
    ran, result, released = y.run(BatchRunner(Recorder()), batch)
    assert [j.id for j in ran.jobs] == ["b0", "b1"] and len(result.outcomes) == 2
    assert [o.id for o in released] == ["b2", "b3", "b4", "b5"]
    assert reg.get_sample_value("sluice_worker_bulk_yields_total", {"model": "m"}) == 1
    assert reg.get_sample_value("sluice_worker_bulk_items_released_total", {"model": "m"}) == 4
    down = fakeredis.FakeServer()
    down.connected = False  # every command raises ConnectionError
    y.probe.redis = fakeredis.FakeRedis(server=down)
    ran, _, released = y.run(BatchRunner(Recorder()), batch)
    assert len(ran.jobs) == 6 and released == []


def test_a_batch_whose_rest_all_ended_stops_without_counting_a_yield() -> None:
    r = fakeredis.FakeRedis()  # no interactive job anywhere
    reg = CollectorRegistry()
    ended = {"b2", "b3", "b4", "b5"}  # the bulk job was cancelled while b0-b1 ran
    y = BulkYield(InteractiveProbe(r, "m", ["32"]), 2, reg, lambda ids: ended.issuperset(ids))
    h = Recorder()
    ran, _, released = y.run(BatchRunner(h), Batch("m", "32", 0, jobs(6)))
    assert [j.id for j in ran.jobs] == ["b0", "b1"] and len(h.calls) == 1
    assert sorted(o.id for o in released) == sorted(ended)
    assert reg.get_sample_value("sluice_worker_bulk_yields_total", {"model": "m"}) is None
