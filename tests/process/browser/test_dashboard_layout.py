"""The workers panel stays readable from 1 to 50 workers (headless Debian chromium).

A real ``sluice gateway`` process on the session's Redis, with worker heartbeats
written straight into the registry (no worker processes: 50 would not fit this
machine): every worker gets a tile, 50 tiles switch to the compact grid and fit
the panel's width in a few rows, one tile stays a full-size card.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from sluice import registry
from tests.factories import worker_info
from tests.kit.chromium import CHROMIUM, FLAGS, gateway_process, sync_api, wait_js

pytestmark = [pytest.mark.system, pytest.mark.timeout(90)]
CONFIG = {
    "models": {
        "big": {"handler": "synthetic", "buckets": [32, 128]},
        "small": {"handler": "synthetic", "buckets": [32, 128]},
    }
}


def _heartbeats(r: redis.Redis, model: str, n: int) -> None:
    now = time.time()
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        state = "quarantined" if i == 7 else "starting" if i % 10 == 9 else "ready"
        info = worker_info(
            id=f"gpu-node-{i // 8:02d}-{4000 + i}-{i:04x}",
            model=model,
            host=f"gpu-node-{i // 8:02d}",
            pid=4000 + i,
            device=f"cuda:{i % 8}",
            buckets=["32", "128"],
            state=state,
            started_at=now - i,
            heartbeat_at=now,
            service_rate=900.0 + i,
            batch_size=i % 32,
        )
        for cmd in registry.heartbeat(info, 120):
            pipe.execute_command(*cmd)
    pipe.execute()


@pytest.fixture
def gateway(redis_url: str, r: redis.Redis, tmp_path: Path) -> Iterator[str]:
    with gateway_process(CONFIG, redis_url, tmp_path) as url:
        _heartbeats(r, "big", 50)
        _heartbeats(r, "small", 1)
        yield url


TILES = """(model) => {
  const grid = document.querySelector(`#model-${model} [data-role="workers"]`);
  const box = grid.getBoundingClientRect();
  const tiles = [...grid.querySelectorAll("[data-worker]")].map((t) => t.getBoundingClientRect());
  return {
    compact: grid.classList.contains("compact"), n: tiles.length,
    inside: tiles.every((t) => t.left >= box.left - 1 && t.right <= box.right + 1),
    rows: new Set(tiles.map((t) => Math.round(t.top))).size,
    minWidth: Math.min(...tiles.map((t) => t.width)), height: box.height,
  };
}"""


def test_workers_panel_at_1_and_50_workers(gateway: str) -> None:
    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(gateway + "/dashboard", wait_until="load")
        wait_js(
            page,
            "document.querySelectorAll('#model-big [data-worker]').length === 50",
            15,
            "50 worker tiles",
        )
        big: dict[str, Any] = page.evaluate(TILES, "big")
        small: dict[str, Any] = page.evaluate(TILES, "small")
        counts = page.text_content("#model-big .states") or ""
        browser.close()
    assert big["n"] == 50 and big["compact"] and big["inside"]
    assert big["rows"] <= 10 and big["minWidth"] >= 90  # a few rows of legible tiles
    assert small["n"] == 1 and not small["compact"] and small["minWidth"] >= 120
    assert "quarantined1" in counts and "starting5" in counts and "ready44" in counts
    assert errors == [], errors
