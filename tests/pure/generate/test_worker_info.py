"""A heartbeat record carries a generative worker's slots; an older record (written
before the fields existed) still parses, as a batch worker with none."""

from __future__ import annotations

import json
from dataclasses import asdict

from sluice.registry import WorkerInfo
from tests.factories import worker_info


def test_slots_round_trip_and_old_records_read_as_no_slots() -> None:
    info = worker_info(slots=16, slots_busy=5, tokens_per_s=812.5)
    back = WorkerInfo.from_json(info.to_json())
    assert (back.slots, back.slots_busy, back.tokens_per_s) == (16, 5, 812.5)
    old = {
        k: v for k, v in asdict(info).items() if k not in ("slots", "slots_busy", "tokens_per_s")
    }
    read = WorkerInfo.from_json(json.dumps(old))
    assert (read.slots, read.slots_busy, read.tokens_per_s) == (0, 0, 0.0)
    assert read.id == info.id
