"""The driver against a scripted gateway (httpx.MockTransport): flows and error accounting."""

from __future__ import annotations

import itertools
import json

import httpx
import pytest

from sluice.errors import ConfigError
from sluicebench.loadgen.driver import Driver, LoadSpec


def _gateway(reject_every: int = 0, fail_every: int = 0) -> httpx.MockTransport:
    """Answers submits (every Nth with 429), then one pending and one finished long-poll."""
    ids = itertools.count(1)
    polls: dict[str, int] = {}
    buckets: dict[str, str] = {}

    def handle(req: httpx.Request) -> httpx.Response:
        if req.method == "POST":
            n = next(ids)
            if reject_every and n % reject_every == 0:
                return httpx.Response(429, json={"error": {"type": "queue_full", "message": "x"}})
            words = len(json.loads(req.content)["input"].split())
            buckets[f"m.{n}"] = "32" if words <= 32 else "512"
            return httpx.Response(202, json={"id": f"m.{n}", "bucket": buckets[f"m.{n}"]})
        job_id = req.url.path.rsplit("/", 1)[1]
        assert float(req.url.params["wait"]) > 0  # a long-poll, not a busy poll
        polls[job_id] = polls.get(job_id, 0) + 1
        if polls[job_id] == 1:
            return httpx.Response(200, json={"id": job_id, "status": "running"})
        n = int(job_id.split(".")[1])
        status = "failed" if fail_every and n % fail_every == 0 else "succeeded"
        timings = {
            "queued_at": 100.0,
            "started_at": 100.002,
            "finished_at": 100.007,
            "queue_wait_ms": 2,
            "run_ms": 5.0,
        }
        view = {"id": job_id, "status": status, "bucket": buckets[job_id], "timings": timings}
        return httpx.Response(200, json=view)

    return httpx.MockTransport(handle)


async def test_closed_loop_counts_every_job_and_errors_by_status() -> None:
    spec = LoadSpec(url="http://gw", model="m", concurrency=4, jobs=60, progress=False)
    out = await Driver(spec, transport=_gateway(reject_every=10, fail_every=7)).run()
    assert out["sent"] == 60
    assert out["errors"]["429"] == 6
    failed = out["errors"]["job_failed"]
    assert failed > 0 and out["succeeded"] == 60 - 6 - failed
    assert out["queue_wait_ms"]["p50"] == 2 and out["run_ms"]["p50"] == 5.0
    assert out["server_ms"]["p50"] == pytest.approx(7.0, abs=0.01)
    assert (
        set(out["buckets"]) <= {"32", "512"}
        and sum(b["jobs"] for b in out["buckets"].values()) == out["succeeded"]
    )
    assert out["spec"]["mode"] == "closed"


async def test_open_loop_sends_on_the_poisson_schedule() -> None:
    spec = LoadSpec(url="http://gw", model="m", rate=400.0, duration_s=0.5, progress=False)
    out = await Driver(spec, transport=_gateway()).run()
    assert 120 < out["sent"] < 290  # Poisson(200): far outside would be a broken schedule
    assert out["succeeded"] == out["sent"] and out["errors"] == {}
    assert out["send_lag_ms"]["count"] == out["sent"]
    assert out["spec"]["mode"] == "poisson"


def test_spec_needs_exactly_one_mode_and_an_end() -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        LoadSpec(url="u", model="m", rate=1.0, concurrency=2, jobs=1).check()
    with pytest.raises(ConfigError, match="duration"):
        LoadSpec(url="u", model="m", concurrency=2).check()
    with pytest.raises(ConfigError, match="warm-up"):
        LoadSpec(url="u", model="m", concurrency=2, duration_s=1.0, warmup_s=1.0).check()


async def test_trace_replays_its_times_and_lengths() -> None:
    from sluicebench.loadgen.workload import Arrival

    trace = [Arrival(0.0, 5), Arrival(0.05, 120), Arrival(0.1, 7)]
    spec = LoadSpec(url="http://gw", model="m", trace=trace, progress=False)
    driver = Driver(spec, transport=_gateway())
    out = await driver.run()
    assert out["sent"] == 3 and out["succeeded"] == 3 and out["spec"]["mode"] == "trace"
    assert sorted(o.words or 0 for o in driver.outcomes) == [5, 7, 120]
    assert out["buckets"]["512"]["jobs"] == 1  # the 120-word input
    sent = sorted(o.sent_s - driver.t0 for o in driver.outcomes)
    assert sent[2] >= 0.1 - 1e-3  # not sent before its time
