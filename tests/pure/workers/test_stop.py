"""Stopping a running batch (ADR 0154): the renewal's news marks jobs stopped, the
handler's ``should_stop()`` sees it between its steps, and a stopped batch sends no
outcome and never counts against the worker."""

from __future__ import annotations

from typing import Any

from sluice.jobs import ClaimedJob
from tests.factories import worker_info
from tests.kit.workers import MODEL, worker_config
from workers.execute import BatchRunner
from workers.handlers import HandlerContext
from workers.handlers.base import Collated, Handler
from workers.handlers.synthetic import SyntheticHandler
from workers.housekeeping import Housekeeper
from workers.status import WorkerStatus


def jobs(n: int) -> list[ClaimedJob]:
    return [ClaimedJob(f"m.{i}", f"text {i}", 2, 1, 0) for i in range(n)]


def synthetic(**params: Any) -> Handler:
    cfg = worker_config(params=dict(params))
    h = SyntheticHandler(HandlerContext(MODEL, cfg.model(MODEL)))
    h.load()
    return h


def test_a_batch_whose_jobs_all_ended_stops_between_steps_and_sends_nothing() -> None:
    # An hour of modelled compute: only the stop check lets this return.
    h = synthetic(base_ms=3_600_000)
    checked: list[list[str]] = []

    def all_stopped(ids: list[str]) -> bool:
        checked.append(ids)
        return len(checked) > 2  # the news arrives while it runs

    res = BatchRunner(h, all_stopped=all_stopped).run(jobs(2))
    assert res.outcomes == [] and not res.failed and res.succeeded == 0
    assert checked[-1] == ["m.0", "m.1"]
    assert not h.should_stop()  # unbound once the attempt is over


def test_a_batch_with_a_job_still_wanted_runs_to_its_end() -> None:
    h = synthetic(base_ms=1, per_token_ms=0)
    res = BatchRunner(h, all_stopped=lambda ids: ids == ["m.0"]).run(jobs(2))
    assert [o.kind for o in res.outcomes] == ["ok", "ok"]  # the worker drops m.0's


class FailsTogether(Handler):
    """Fails any batch of more than one input: the runner goes item by item."""

    def collate(self, inputs: list[Any], costs: list[int]) -> Collated:
        return Collated(list(inputs), len(inputs), sum(costs), sum(costs))

    def infer(self, batch: Collated) -> Any:
        if batch.size > 1:
            raise RuntimeError("together")
        return batch.data

    def postprocess(self, output: Any, batch: Collated) -> list[Any]:
        return list(output)


def test_item_by_item_retries_skip_a_stopped_job() -> None:
    cfg = worker_config()
    h = FailsTogether(HandlerContext(MODEL, cfg.model(MODEL)))
    res = BatchRunner(h, all_stopped=lambda ids: ids == ["m.1"]).run(jobs(3))
    assert [(o.id, o.kind) for o in res.outcomes] == [("m.0", "ok"), ("m.2", "ok")]
    assert not res.failed


class RenewalSays:
    def __init__(self, why: dict[str, str]) -> None:
        self.why = why

    def renew_why(self, model: str, worker_id: str, job_ids: list[str]) -> dict[str, str]:
        return self.why


def test_the_renewal_marks_ended_jobs_stopped_and_lost_ones_lost() -> None:
    status = WorkerStatus(worker_info(id="w1"))
    status.hold(["m.a", "m.b", "m.c", "m.d"])
    status.ending(["m.d"])  # its outcome is on its way: not this worker's to stop
    why = {"m.a": "cancelled", "m.b": "lost", "m.c": "run_time_exceeded", "m.d": "succeeded"}
    hk = Housekeeper(
        RenewalSays(why),  # type: ignore[arg-type]
        status,
        heartbeat_s=1.0,
        ttl_s=2.0,
        lease_s=3.0,
        on_command=lambda c: None,
    )
    hk.renew()
    assert status.stopped(["m.a", "m.b", "m.c", "m.d"]) == {"m.a", "m.c"}
    assert list(hk.lost) == ["m.b"]
    assert status.all_stopped(["m.a", "m.c"]) and not status.all_stopped(["m.a", "m.b"])
    status.release(["m.a"])
    assert status.stopped(["m.a"]) == set()
