"""Bulk jobs through the gateway on a real Redis, run to the end by a coordinator.

The gateway queues the first coordinator slice on RQ as in production; the test
runs the coordinator itself (``Coordinator.run_slice``) with a fake worker as its
``sleep``: every poll, the worker claims one batch through the real scripts and
completes it, so each interleaving is exact.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio
import redis
from rq import Queue

from bulkworker.coordinator import Coordinator
from sluice import keys
from sluice.config import BulkConfig, SluiceConfig
from sluice.jobs import Outcome
from sluice.queue import QueueClient
from tests.kit.gateway import Harness, HarnessFactory, gateway_config

pytestmark = pytest.mark.redis
LINE_LIMIT = 4096  # gateway_config()'s gateway.max_body_bytes: each line's limit
NDJSON = {"content-type": "application/x-ndjson"}


@pytest.fixture
def kind() -> str:
    return "real"


def bulk_config() -> SluiceConfig:
    """Model ``m`` (words, buckets 32/128/512) with a small window, so a file takes
    many polls: each feeds at most 16 lines and keeps at most 8 queued."""
    cfg = gateway_config(bulk={"max_queued": 8}, batching={"max_batch": 4})
    bulk = BulkConfig(feed_chunk=16, slice_s=3600, poll_s=0.01, lease_s=5)
    return cfg.model_copy(update={"bulk": bulk})


@pytest_asyncio.fixture(loop_scope="function")
async def bgw(make_gateway: HarnessFactory) -> AsyncIterator[Harness]:
    async with make_gateway(bulk_config()) as h:
        yield h


@pytest.fixture
def q(r: redis.Redis) -> Iterator[QueueClient]:
    yield QueueClient(r, dict(bulk_config().models))


def worker(q: QueueClient, fail_on: str = "boom") -> Callable[[float], None]:
    """A poll's sleep that runs one batch: result ``{"echo": input}``; an input equal
    to ``fail_on`` fails, as a handler error would."""

    def run_one_batch(_: float) -> None:
        batch = q.claim("m", "w1")
        outcomes = [
            Outcome.fail(j.id, "handler_error", "it went boom")
            if j.input == fail_on
            else Outcome.ok(j.id, {"echo": j.input})
            for j in batch.jobs
        ]
        if outcomes:
            q.complete("m", outcomes, "w1")

    return run_one_batch


def output_rows(text: str) -> list[dict[str, Any]]:
    assert text.endswith("\n")
    return [json.loads(x) for x in text.splitlines()]


# The file: 200 lines, every 10th one bad in its own way; all the others good.
BAD = {
    4: ("{not json", None, "invalid_input"),
    14: (json.dumps({"custom_id": "no-input"}), "no-input", "invalid_input"),
    24: (json.dumps({"input": "w " * LINE_LIMIT, "custom_id": "huge"}), None, "input_too_large"),
    34: (None, None, "invalid_input"),  # not UTF-8 (bytes below)
    44: ("", None, "invalid_input"),  # blank
    54: (json.dumps({"input": "w " * 600, "custom_id": "words"}), "words", "input_too_large"),
    64: (json.dumps({"input": 42, "custom_id": "int"}), "int", "invalid_input"),
    74: (json.dumps({"input": "x", "colour": "red"}), None, "invalid_input"),
    84: (json.dumps({"input": "x", "custom_id": 7}), None, "invalid_input"),
    94: ("[1, 2]", None, "invalid_input"),
    104: ('{"input": NaN, "custom_id": "nan"}', None, "invalid_input"),  # not strict JSON
}
FAILS_IN_WORKER = 150  # a good line whose handler fails: status "failed", the worker's error
N = 200


def bulk_file() -> tuple[bytes, dict[int, Any]]:
    """The upload (mixed LF and CRLF endings) and each good line's input, by index."""
    raw: list[bytes] = []
    inputs: dict[int, Any] = {}
    for i in range(N):
        if i in BAD:
            text = BAD[i][0]
            raw.append(
                b'{"input": "\xff\xfe", "custom_id": "latin"}' if text is None else text.encode()
            )
            continue
        value: Any = "boom" if i == FAILS_IN_WORKER else f"text number {i}"
        if i % 7 == 0:
            value = {"text": f"object input {i}"}
        inputs[i] = value
        raw.append(json.dumps({"input": value, "custom_id": f"c{i}"}).encode())
    body = b"".join(line + (b"\r\n" if i % 3 == 0 else b"\n") for i, line in enumerate(raw))
    return body, inputs


async def test_a_file_runs_to_the_end_with_one_output_line_per_input_line(
    bgw: Harness, q: QueueClient, redis_url: str
) -> None:
    body, inputs = bulk_file()
    resp = await bgw.client.post("/v1/models/m/bulk", content=body, headers=NDJSON)
    assert resp.status_code == 202, resp.text
    bulk_id = resp.json()["id"]
    assert resp.json()["counts"]["total"] == N
    # The gateway queued the first coordinator slice on RQ, and named it.
    rq_queue = Queue(bgw.state.cfg.bulk.rq_queue, connection=redis.Redis.from_url(redis_url))
    assert rq_queue.job_ids == [await bgw.redis.hget(keys.bulk_key("m", bulk_id), "rq_job")]

    coordinator = Coordinator(q, bgw.state.cfg, bulk_id, sleep=worker(q))
    assert coordinator.run_slice() == "finished"

    view = (await bgw.client.get(f"/v1/bulk/{bulk_id}")).json()
    failed = len(BAD) + 1  # the bad lines and the one whose handler failed
    assert view["state"] == "completed"
    assert view["counts"] == {
        "total": N,
        "done": N,
        "succeeded": N - failed,
        "failed": failed,
        "remaining": 0,
        "fed": N,
    }
    assert view["started_at"] <= view["finished_at"] and view["eta_s"] is None

    out = await bgw.client.get(f"/v1/bulk/{bulk_id}/output")
    assert out.status_code == 200 and out.headers["content-type"] == "application/x-ndjson"
    rows = output_rows(out.text)
    assert [r["line"] for r in rows] == list(range(1, N + 1))  # one per line, in order
    for i, row in enumerate(rows):
        assert set(row) == {"line", "custom_id", "status", "result", "error"}
        if i in BAD:
            _, custom_id, error_type = BAD[i]
            assert (row["status"], row["custom_id"]) == ("failed", custom_id), row
            assert row["error"]["type"] == error_type and row["result"] is None, row
        elif i == FAILS_IN_WORKER:
            assert row["status"] == "failed" and row["custom_id"] == f"c{i}"
            assert row["error"] == {"type": "handler_error", "message": "it went boom"}
        else:  # its own result: nothing shifted or swapped
            assert row == {
                "line": i + 1,
                "custom_id": f"c{i}",
                "status": "succeeded",
                "result": {"echo": inputs[i]},
                "error": None,
            }
    assert str(LINE_LIMIT) in rows[24]["error"]["message"]  # over gateway.max_body_bytes
    assert "512" in rows[54]["error"]["message"]  # over the largest bucket
    assert "UTF-8" in rows[34]["error"]["message"]
    # Nothing left queued or pending; the ended bulk job left the active set.
    assert (await bgw.queue.stats("m")).queued == 0
    assert not await bgw.redis.exists(keys.bulk_pending_key("m", bulk_id))
    assert await bgw.redis.zscore(keys.bulk_active_key("m"), bulk_id) is None
    late = await bgw.client.delete(f"/v1/bulk/{bulk_id}")
    assert late.status_code == 409 and "completed" in late.json()["error"]["message"]


def slice_of(polls: int) -> tuple[Callable[[], float], Callable[[float], None]]:
    """A clock and worker that end a slice after ``polls`` polls (each running a batch)."""
    done = [0]

    def clock() -> float:
        return 1e9 if done[0] >= polls else 0.0

    def sleep(s: float) -> None:
        done[0] += 1

    return clock, sleep


async def test_cancel_while_running_keeps_finished_lines_and_cancels_the_rest(
    bgw: Harness, q: QueueClient
) -> None:
    lines = [json.dumps({"input": f"t {i}", "custom_id": f"c{i}"}) for i in range(60)]
    resp = await bgw.client.post(
        "/v1/models/m/bulk", content="\n".join(lines).encode(), headers=NDJSON
    )
    bulk_id = resp.json()["id"]
    cfg = bgw.state.cfg
    clock, polls = slice_of(4)
    run = worker(q)

    def sleep(s: float) -> None:
        run(s)
        polls(s)

    # One slice: four polls with a batch each, then the slice ends (lease released).
    assert Coordinator(q, cfg, bulk_id, clock=clock, sleep=sleep).run_slice() == "slice"
    running = (await bgw.client.get(f"/v1/bulk/{bulk_id}")).json()
    assert running["state"] == "running" and 0 < running["counts"]["succeeded"] < 60
    assert running["counts"]["fed"] < 60 and (await bgw.queue.stats("m")).queued > 0

    cancel = await bgw.client.delete(f"/v1/bulk/{bulk_id}")
    assert cancel.status_code == 200, cancel.text
    assert cancel.json() == {"id": bulk_id, "state": "cancelling", "previous_state": "running"}
    again = await bgw.client.delete(f"/v1/bulk/{bulk_id}")  # asking twice is no conflict
    assert again.json() == {"id": bulk_id, "state": "cancelling", "previous_state": "cancelling"}
    assert (await bgw.client.get(f"/v1/bulk/{bulk_id}")).json()["state"] == "cancelling"
    early = await bgw.client.get(f"/v1/bulk/{bulk_id}/output")
    assert early.status_code == 409 and "cancelling" in early.json()["error"]["message"]

    # The next slice sees the cancel: it feeds nothing more and ends the bulk job.
    assert Coordinator(q, cfg, bulk_id, sleep=run).run_slice() == "finished"
    view = (await bgw.client.get(f"/v1/bulk/{bulk_id}")).json()
    assert view["state"] == "cancelled"
    assert view["counts"]["succeeded"] == running["counts"]["succeeded"]
    assert view["counts"]["fed"] == running["counts"]["fed"]
    assert (await bgw.queue.stats("m")).queued == 0  # its queued items were cancelled

    rows = output_rows((await bgw.client.get(f"/v1/bulk/{bulk_id}/output")).text)
    assert [r["line"] for r in rows] == list(range(1, 61))
    assert [r["custom_id"] for r in rows] == [f"c{i}" for i in range(60)]
    kept = [r for r in rows if r["status"] == "succeeded"]
    assert len(kept) == running["counts"]["succeeded"]
    for r in kept:
        assert r["result"] == {"echo": f"t {r['line'] - 1}"}
    for r in rows:
        if r["status"] != "succeeded":
            assert r["status"] == "cancelled" and r["error"]["type"] == "cancelled", r
    assert (await bgw.client.delete(f"/v1/bulk/{bulk_id}")).status_code == 409


async def test_a_cancel_keeps_lines_that_ended_unseen_and_cancels_running_ones(
    bgw: Harness, q: QueueClient
) -> None:
    lines = [json.dumps({"input": f"t {i}", "custom_id": f"c{i}"}) for i in range(20)]
    resp = await bgw.client.post(
        "/v1/models/m/bulk", content="\n".join(lines).encode(), headers=NDJSON
    )
    bulk_id = resp.json()["id"]
    clock, polls = slice_of(1)
    # One poll that only feeds (8 lines: max_queued), then the slice ends.
    assert Coordinator(q, bgw.state.cfg, bulk_id, clock=clock, sleep=polls).run_slice() == "slice"
    worker(q)(0)  # lines 1-4 end after that poll, before any coordinator sees them
    running = q.claim("m", "w2")  # lines 5-8 are running when the cancel comes
    assert len(running.jobs) == 4
    assert (await bgw.client.delete(f"/v1/bulk/{bulk_id}")).json()["state"] == "cancelling"
    assert Coordinator(q, bgw.state.cfg, bulk_id).run_slice() == "finished"
    q.complete("m", [Outcome.ok(j.id, "late") for j in running.jobs], "w2")  # discarded

    view = (await bgw.client.get(f"/v1/bulk/{bulk_id}")).json()
    assert view["state"] == "cancelled" and view["counts"]["succeeded"] == 4
    rows = output_rows((await bgw.client.get(f"/v1/bulk/{bulk_id}/output")).text)
    assert [r["status"] for r in rows] == ["succeeded"] * 4 + ["cancelled"] * 16
    assert [r["result"] for r in rows[:4]] == [{"echo": f"t {i}"} for i in range(4)]
    assert all(r["result"] is None for r in rows[4:])
