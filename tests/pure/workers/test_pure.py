"""Pure parts of the worker: budget, rate, streak, warm-up shapes, batch fault paths."""

from __future__ import annotations

import pytest

from sluice.errors import ConfigError, InvalidInput
from sluice.jobs import ClaimedJob
from tests.kit.fault_handlers import OomHandler, PoisonHandler
from tests.kit.workers import MODEL, worker_config
from workers.budget import FailureStreak, ServiceRate, TokenBudget
from workers.execute import BatchRunner
from workers.handlers import HandlerContext, Shape, load_handler_class, warmup_shapes
from workers.handlers.base import Collated, Handler


def jobs(texts: list[str]) -> list[ClaimedJob]:
    return [ClaimedJob(f"m.{i}", t, len(t.split()), 1, 0) for i, t in enumerate(texts)]


def handler(cls: type[Handler], **params: object) -> Handler:
    cfg = worker_config(params=dict(params))
    h = cls(HandlerContext(MODEL, cfg.model(MODEL)))
    h.load()
    return h


def test_budget_halves_on_oom_and_recovers_slowly() -> None:
    b = TokenBudget(ceiling=1000, floor=10, recover_after=2, recover_factor=1.5)
    assert b.on_oom(batch_cost=800) == 400  # half of the failed batch
    assert b.on_oom(batch_cost=12) == 10  # never under the floor
    assert b.on_success() == 10  # one good batch is not enough
    assert b.on_success() == 15  # 10 * 1.5 after recover_after good batches
    for _ in range(40):
        b.on_success()
    assert b.current == 1000  # back to the configured ceiling, not above


def test_service_rate_is_cost_per_busy_second_over_a_window() -> None:
    r = ServiceRate(window=2)
    r.add(100, 1.0)
    r.add(300, 1.0)
    assert r.rate == pytest.approx(200.0)
    r.add(900, 1.0)  # the first sample leaves the window: (300 + 900) / 2
    assert r.rate == pytest.approx(600.0)


def test_failure_streak_resets_on_success() -> None:
    s = FailureStreak(limit=2)
    assert not s.record(True)
    assert not s.record(False)
    assert not s.record(True)
    assert s.record(True)


@pytest.mark.parametrize(
    ("max_batch", "budget", "expected"),
    [
        # min(max_batch, budget // bound) inputs of `bound` tokens, at least one
        (8, 4096, [Shape(8, 32), Shape(8, 128), Shape(8, 512)]),
        (32, 4096, [Shape(32, 32), Shape(32, 128), Shape(8, 512)]),
        (32, 512, [Shape(16, 32), Shape(4, 128), Shape(1, 512)]),
    ],
)
def test_warmup_shapes_are_each_buckets_largest_batch(
    max_batch: int, budget: int, expected: list[Shape]
) -> None:
    cfg = worker_config(batching={"max_batch": max_batch, "max_batch_tokens": budget})
    assert warmup_shapes(cfg.model(MODEL), ["32", "128", "512"]) == expected


def test_handler_specs() -> None:
    assert load_handler_class("synthetic").__name__ == "SyntheticHandler"
    assert load_handler_class("tests.kit.fault_handlers:OomHandler") is OomHandler
    with pytest.raises(ConfigError, match="not a built-in"):
        load_handler_class("nope")
    with pytest.raises(ConfigError, match="cannot import"):
        load_handler_class("no_such_pkg.mod:Cls")
    with pytest.raises(ConfigError, match="not a workers.handlers.Handler"):
        load_handler_class("sluice.jobs:Outcome")


def test_poison_input_fails_alone_and_the_rest_succeed() -> None:
    res = BatchRunner(handler(PoisonHandler)).run(jobs(["a b", "poison here", "c d e"]))
    kinds = {o.id: o.kind for o in res.outcomes}
    assert kinds == {"m.0": "ok", "m.1": "fail", "m.2": "ok"}
    assert res.outcomes[1].payload == {"type": "ValueError", "message": "poison input"}
    assert not res.failed  # the inputs were at fault, not the worker


def test_a_batch_where_everything_fails_is_retried_elsewhere() -> None:
    res = BatchRunner(handler(PoisonHandler)).run(jobs(["poison 1", "poison 2"]))
    assert [o.kind for o in res.outcomes] == ["retry", "retry"]
    assert res.failed


class _Invalid(PoisonHandler):
    def collate(self, inputs: list[object], costs: list[int]) -> Collated:
        if any(not isinstance(x, str) for x in inputs):
            raise InvalidInput("input must be a string")
        return super().collate(inputs, costs)


def test_invalid_input_fails_for_good_without_blaming_the_worker() -> None:
    bad = [ClaimedJob("m.0", {"x": 1}, 1, 1, 0)]
    res = BatchRunner(handler(_Invalid)).run(bad)
    assert [o.kind for o in res.outcomes] == ["fail"]
    assert res.outcomes[0].payload["type"] == "InvalidInput"
    assert not res.failed


def test_oom_splits_the_batch_until_it_fits() -> None:
    OomHandler.seen.clear()
    texts = ["w " * 3] * 8  # 8 inputs x 3 tokens = 24 padded tokens
    res = BatchRunner(handler(OomHandler, oom_above=6)).run(jobs(texts))
    assert all(o.kind == "ok" for o in res.outcomes)
    assert OomHandler.seen == [2, 2, 2, 2]  # 8 -> 4 -> 2 (6 tokens fit)
    assert res.oom_splits == 3  # the 8 and both 4s
    assert not res.failed


def test_oom_on_a_single_input_goes_back_to_the_queue() -> None:
    res = BatchRunner(handler(OomHandler, oom_above=4)).run(jobs(["a b c d e f", "a"]))
    kinds = [o.kind for o in res.outcomes]
    assert kinds == ["retry", "ok"]  # a bigger device may fit it: never failed for good here
    assert res.outcomes[0].payload["type"] == "OutOfMemoryError"


def test_synthetic_embeddings_are_unit_vectors_of_their_input() -> None:
    from workers.handlers.synthetic import SyntheticHandler

    plain = BatchRunner(handler(SyntheticHandler, base_ms=0, per_token_ms=0))
    assert [o.payload for o in plain.run(jobs(["a b", "c"])).outcomes] == [
        {"tokens": 2},
        {"tokens": 1},
    ]
    emb = BatchRunner(handler(SyntheticHandler, base_ms=0, per_token_ms=0, embedding_dim=16))
    first = [o.payload["embedding"] for o in emb.run(jobs(["a b", "c", "a b"])).outcomes]
    again = [o.payload["embedding"] for o in emb.run(jobs(["c"])).outcomes]
    assert [len(v) for v in first] == [16, 16, 16]
    assert all(abs(sum(x * x for x in v) - 1) < 1e-9 for v in first)
    assert first[0] == first[2] != first[1] == again[0]  # the input decides, not the batch


def test_a_cpu_warms_one_input_per_bucket_a_gpu_its_largest_batches() -> None:
    cfg = worker_config(batching={"max_batch": 64, "max_batch_tokens": 16384})
    small = warmup_shapes(cfg.model(MODEL), ["32", "128", "512"], full=False)
    assert small == [Shape(1, 32), Shape(1, 128), Shape(1, 512)]
    tiny = load_handler_class("tiny")(HandlerContext(MODEL, cfg.model(MODEL), device="cpu"))
    assert tiny.warmup_full_batches() is False  # a torch handler on the CPU
    synthetic = load_handler_class("synthetic")(HandlerContext(MODEL, cfg.model(MODEL)))
    assert synthetic.warmup_full_batches() is True  # the base default: find the limit
