"""Bulk gauges and counter on the gateway's /metrics (fakeredis and real Redis)."""

from __future__ import annotations

import json
import time

from sluice import keys
from tests.kit.gateway import Harness


def sample(text: str, name: str, model: str = "m") -> float:
    prefix = f'{name}{{model="{model}"}} '
    line = next(x for x in text.splitlines() if x.startswith(prefix))
    return float(line.removeprefix(prefix))


async def test_bulk_gauges_come_from_live_coordinator_reports(gw: Harness) -> None:
    now_ms = int(time.time() * 1000)
    live = {"queued": 3, "queued_cost": 30, "backlog_cost": 900, "at_ms": now_ms}
    dead = {**live, "backlog_cost": 5000, "at_ms": now_ms - 120_000}  # its coordinator died
    await gw.redis.hset(
        keys.bulk_backlog_key("m"),
        mapping={
            "m.bulk1": json.dumps(live),
            "m.bulk2": json.dumps(dead),
            "m.bulk3": "not json",
        },
    )
    await gw.refresh()
    text = (await gw.client.get("/metrics")).text
    assert sample(text, "sluice_bulk_jobs_running") == 1
    assert sample(text, "sluice_bulk_backlog_cost") == 900
    assert sample(text, "sluice_bulk_jobs_running", "pinned") == 0


async def test_an_accepted_bulk_file_is_counted(gw: Harness) -> None:
    body = b'{"input": "a b"}\n{"input": "c"}\n'
    r = await gw.client.post(
        "/v1/models/m/bulk", content=body, headers={"Content-Type": "application/x-ndjson"}
    )
    assert r.status_code == 202, r.text
    refused = await gw.client.post(
        "/v1/models/m/bulk", content=b"", headers={"Content-Type": "application/x-ndjson"}
    )
    assert refused.status_code == 422
    text = (await gw.client.get("/metrics")).text
    assert sample(text, "sluice_bulk_jobs_submitted_total") == 1
