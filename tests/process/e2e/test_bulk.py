"""Bulk jobs end to end: ``sluice up`` (with its RQ bulk worker) and ``sluice bulk``.

A file of thousands of lines finishes with every line, in order; killing the
coordinator (the RQ work horse running its slice) mid-run loses and duplicates
nothing; cancel stops feeding.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sluice import keys
from sluice.client import Client
from tests.kit.cli import in_process as sluice
from tests.kit.http import HTTP
from tests.kit.receiver import receiving
from tests.kit.upstack import Up, launch, shut_down
from tests.waits import wait_until

pytestmark = [pytest.mark.system]
MODEL = "syn"
CONFIG = {
    "models": {
        MODEL: {
            "handler": "synthetic",
            "params": {"base_ms": 3, "per_token_ms": 0.02},
            "buckets": [16, 64],
            "cost": {"method": "words"},
            "batching": {"max_batch": 32, "max_batch_tokens": 2048, "lease_s": 5},
            "autoscaling": {"min_replicas": 1, "max_replicas": 1},
        },
    },
    # Short leases and slices: a killed coordinator is resumed within seconds, and a
    # run of thousands of lines goes through several RQ slices.
    "bulk": {"lease_s": 2, "poll_s": 0.05, "slice_s": 4},
    "worker": {"heartbeat_s": 0.3, "heartbeat_ttl_s": 3},
    # the receiver of the metrics test listens on loopback
    "webhooks": {"allow_networks": ["127.0.0.1/32"], "allow_http": True},
}
CANCELLED_LINES = 10_000
BAD = {
    13: "{not json",
    250: '{"custom_id": "no-input"}',
    999: "",
    1500: json.dumps({"input": " ".join(["w"] * 100), "custom_id": "too-big"}),
}


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    stack = launch(CONFIG, tmp_path_factory.mktemp("bulk"))
    yield stack
    shut_down(stack)


def bulk_file(path: Path, n: int) -> list[str | None]:
    """n lines, a few bad; returns each line's custom_id (None where the line is bad)."""
    ids: list[str | None] = []
    with path.open("w") as f:
        for i in range(n):
            if i in BAD:
                f.write(BAD[i] + "\n")
                ids.append("too-big" if i == 1500 else "no-input" if i == 250 else None)
            else:
                f.write(
                    json.dumps({"input": " ".join(["w"] * (1 + i % 40)), "custom_id": f"c{i}"})
                    + "\n"
                )  # noqa: E501
                ids.append(f"c{i}")
    return ids


def check_output(lines: list[dict[str, object]], ids: list[str | None]) -> None:
    assert [o["line"] for o in lines] == list(range(1, len(ids) + 1))
    assert [o["custom_id"] for o in lines] == ids
    failed = {o["line"] for o in lines if o["status"] != "succeeded"}
    assert failed == {i + 1 for i in BAD if i < len(ids)}
    for i, o in enumerate(lines):
        if o["status"] == "succeeded":
            assert o["result"] == {"tokens": 1 + i % 40}, o


def coordinator_horse(up: Up) -> psutil.Process | None:
    """The RQ work horse running a coordinator slice (a child of the bulk worker)."""
    for p in psutil.Process(up.proc.pid).children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            if "bulk" in cmd and "worker" in cmd and p.children():
                return p.children()[0]
        except psutil.NoSuchProcess:
            continue
    return None


def test_thousands_of_lines_every_line_in_order(up: Up, tmp_path: Path) -> None:
    ids = bulk_file(tmp_path / "in.jsonl", 5000)
    out = tmp_path / "out.jsonl"
    run = sluice(
        "bulk",
        "submit",
        str(tmp_path / "in.jsonl"),
        "--model",
        MODEL,
        "--url",
        up.gateway,
        "-o",
        str(out),
    )
    assert run.exit_code == 0, run.stderr[-2000:]
    final = json.loads(run.stdout.strip().splitlines()[-1])
    assert final["state"] == "completed"
    assert final["counts"] == {
        "total": 5000,
        "done": 5000,
        "succeeded": 4996,
        "failed": 4,
        "remaining": 0,
        "fed": 5000,
    }
    check_output([json.loads(x) for x in out.read_text().splitlines()], ids)


def test_killing_the_coordinator_loses_and_duplicates_nothing(up: Up, tmp_path: Path) -> None:
    ids = bulk_file(tmp_path / "in.jsonl", 4000)
    with up.queue() as q:
        before = q.stats(MODEL).counters.get("succeeded", 0)
    with Client(up.gateway) as c:
        view = c.bulk_submit(MODEL, (tmp_path / "in.jsonl").read_bytes())
        wait_until(
            lambda: c.bulk_get(view["id"])["counts"]["done"] >= 800,
            60,
            "800 lines done",
            every_s=0.2,
        )
        horse = coordinator_horse(up)
        assert horse is not None, "no coordinator slice is running"
        done_at_kill = c.bulk_get(view["id"])["counts"]["done"]
        os.kill(horse.pid, signal.SIGKILL)
        final = c.bulk_wait(view["id"], timeout_s=180, poll_s=0.5)
        lines = list(c.bulk_output(view["id"]))
    assert done_at_kill < 4000, "the kill must land mid-run"
    assert final["state"] == "completed" and final["counts"]["done"] == 4000
    check_output(lines, ids)
    # Each good line ran exactly once: the resumed coordinator resubmitted nothing
    # that had already run (its job ids are stable), and lost nothing.
    with up.queue() as q:
        assert q.stats(MODEL).counters["succeeded"] - before == 3996


def test_cancel_stops_feeding(up: Up, tmp_path: Path) -> None:
    # 10,000 lines: some 10 s of work, cancelled 200 lines in (bulk.max_queued, 128
    # here, is all that is fed ahead of the done count).
    bulk_file(tmp_path / "in.jsonl", CANCELLED_LINES)
    with Client(up.gateway) as c:
        view = c.bulk_submit(MODEL, (tmp_path / "in.jsonl").read_bytes())
        wait_until(
            lambda: c.bulk_get(view["id"])["counts"]["done"] >= 200,
            60,
            "200 lines done",
            every_s=0.2,
        )
        cancel = sluice("bulk", "cancel", view["id"], "--url", up.gateway)
        assert cancel.exit_code == 0, cancel.stderr
        assert json.loads(cancel.stdout)["previous_state"] == "running"
        final = c.bulk_wait(view["id"], timeout_s=30, poll_s=0.2)
        assert final["state"] == "cancelled"
        time.sleep(1.0)
        later = c.bulk_get(view["id"])
        lines = list(c.bulk_output(view["id"]))
    assert later["counts"]["fed"] == final["counts"]["fed"] < CANCELLED_LINES  # feeding stopped
    with up.queue() as q:
        queues = [keys.queue_key(MODEL, b) for b in ("16", "64")]
        bulk_queued = sum(q.redis.zcount(k, 3e12, "+inf") for k in queues)
    assert bulk_queued == 0  # its queued items were cancelled, not left to run
    assert len(lines) == CANCELLED_LINES
    statuses = {o["status"] for o in lines}
    assert statuses <= {"succeeded", "failed", "cancelled"} and "cancelled" in statuses
    assert sum(o["status"] == "succeeded" for o in lines) == later["counts"]["succeeded"]


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A /metrics page as {(sample name, labels): value}."""
    text = HTTP.get(url, timeout=10).text
    return {
        (smp.name, tuple(sorted(smp.labels.items()))): smp.value
        for fam in text_string_to_metric_families(text)
        for smp in fam.samples
    }


def test_the_notifier_and_the_bulk_worker_serve_metrics_named_in_the_banner(up: Up) -> None:
    """`sluice up` gives the notifier and each RQ bulk worker a metrics port and names
    it in its banner; what they count shows there after a bulk job with a webhook."""
    named = {x.split()[0]: x.split()[2] for x in up.printed if x.split()[1:2] == ["metrics"]}
    assert set(named) >= {"notifier", "bulk-worker-0"}, up.printed
    with receiving() as rx, Client(up.gateway) as c:
        lines = "\n".join(json.dumps({"input": f"line {i}"}) for i in range(3)).encode()
        r = HTTP.post(
            f"{up.gateway}/v1/models/{MODEL}/bulk",
            params={"webhook_url": rx.url, "webhook_events": "completed"},
            content=lines,
            headers={"Content-Type": "application/x-ndjson"},
            timeout=30,
        )
        assert r.status_code == 202, r.text
        wait_until(
            lambda: c.bulk_get(r.json()["id"])["state"] == "completed",
            120,
            "completed",
            every_s=0.2,
        )
        wait_until(lambda: len(rx.calls) >= 1, 60, "the bulk job's webhook", every_s=0.2)
    delivered = (("model", MODEL), ("outcome", "delivered"))
    wait_until(
        lambda: (
            scrape(named["notifier"]).get(("sluice_webhook_deliveries_total", delivered), 0) >= 1
        ),
        30,
        "the delivery counted on the notifier's /metrics",
        every_s=0.2,
    )
    bulk = scrape(named["bulk-worker-0"])
    assert bulk[("sluice_bulk_slices_total", (("outcome", "finished"),))] >= 1, bulk
    assert ("sluice_bulk_rq_queued", ()) in bulk
