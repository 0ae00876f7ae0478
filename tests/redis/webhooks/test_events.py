"""The SSE streams through a real uvicorn server on a real Redis: a job's status
changes and result, a model's ended jobs, each resumed with Last-Event-ID."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from sluice.config import SluiceConfig, parse_config
from sluice.jobs import Outcome
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.kit.served import served
from tests.waits import HUNG_S, wait_until


@pytest.fixture
def cfg() -> SluiceConfig:
    model = {"handler": "synthetic", "buckets": [32], "autoscaling": {"min_replicas": 0}}
    return parse_config({"models": {"m": model}})


@pytest.fixture
def stack(cfg: SluiceConfig, redis_url: str) -> Iterator[tuple[httpx.Client, QueueClient]]:
    q = QueueClient(connect(redis_url), dict(cfg.models))
    with served(create_app(cfg, redis_url)) as port:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=HUNG_S) as c:
            yield c, q
    q.redis.close()


def events(resp: httpx.Response, until: str, seen: list[dict[str, Any]] | None = None):  # type: ignore[no-untyped-def]
    """Parse SSE events (id, event, data) until one named ``until``; each is also
    appended to ``seen`` as it arrives (another thread watches it)."""
    out: list[dict[str, Any]] = seen if seen is not None else []
    cur: dict[str, Any] = {}
    for line in resp.iter_lines():
        if line == "":
            if "event" in cur:
                out.append(cur)
                if cur["event"] == until:
                    return out
            cur = {}
            continue
        field, _, value = line.partition(": ")
        if field in ("id", "event"):
            cur[field] = value
        elif field == "data":
            cur["data"] = json.loads(value)
    return out


def test_a_job_stream_sends_each_change_then_the_result_and_resumes(
    stack: tuple[httpx.Client, QueueClient],
) -> None:
    c, q = stack
    job_id = c.post("/v1/models/m/jobs", json={"input": "hi"}).json()["id"]
    seen: list[dict[str, Any]] = []

    def worker() -> None:
        wait_until(lambda: len(seen) >= 1, what="queued event")
        batch = q.claim("m", "w1")
        wait_until(lambda: len(seen) >= 2, what="running event")
        q.complete("m", [Outcome.ok(batch.jobs[0].id, [0.5])], "w1")

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    with c.stream("GET", f"/v1/jobs/{job_id}/events") as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        got = events(resp, "result", seen)
    t.join(HUNG_S)
    assert [(e["id"], e["event"]) for e in got] == [
        ("0", "status"), ("1", "status"), ("1000000", "status"), ("1000001", "result"),
    ]  # fmt: skip
    assert [e["data"]["status"] for e in got] == ["queued", "running", "succeeded", "succeeded"]
    assert got[3]["data"]["result"] == [0.5] and got[3]["data"]["id"] == job_id
    # a reconnect after the status event gets only the result
    with c.stream("GET", f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": "1000000"}) as resp:
        assert [(e["id"], e["event"]) for e in events(resp, "result")] == [("1000001", "result")]
    # after the result, a reconnect is told to stop (204: EventSource reconnects no more)
    done = c.get(f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": "1000001"})
    assert done.status_code == 204 and done.content == b""
    assert c.get(f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": "x"}).status_code == 422
    assert c.get("/v1/jobs/m.nothing/events").status_code == 404


def test_a_model_stream_carries_ended_jobs_and_resumes(
    stack: tuple[httpx.Client, QueueClient],
) -> None:
    c, q = stack
    ids = [c.post("/v1/models/m/jobs", json={"input": "hi"}).json()["id"] for _ in range(2)]
    batch = q.claim("m", "w1")
    q.complete("m", [Outcome.ok(j.id, [1.0]) for j in batch.jobs], "w1")
    with c.stream("GET", "/v1/models/m/events", headers={"Last-Event-ID": "0-0"}) as resp:
        (ended,) = events(resp, "ended")
    assert ended["data"]["model"] == "m"
    assert {(j["id"], j["status"]) for j in ended["data"]["jobs"]} == {
        (i, "succeeded") for i in ids
    }
    seen: list[dict[str, Any]] = []
    third = c.post("/v1/models/m/jobs", json={"input": "hi"}).json()["id"]

    def cancel_later() -> None:
        wait_until(lambda: stream_open.is_set(), what="the stream")
        c2 = httpx.Client(base_url=str(c.base_url), timeout=HUNG_S)
        c2.delete(f"/v1/jobs/{third}")
        c2.close()

    stream_open = threading.Event()
    t = threading.Thread(target=cancel_later, daemon=True)
    t.start()
    with c.stream("GET", "/v1/models/m/events", headers={"Last-Event-ID": ended["id"]}) as resp:
        stream_open.set()
        (later,) = events(resp, "ended", seen)
    t.join(HUNG_S)
    assert later["data"]["jobs"] == [{"id": third, "status": "cancelled"}]
    assert c.get("/v1/models/zz/events").status_code == 404
    for bad in ("nope", f"{2**64}-0", "1-2-3"):
        assert c.get("/v1/models/m/events", headers={"Last-Event-ID": bad}).status_code == 422
