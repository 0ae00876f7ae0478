"""Hostile strings in the dashboard's data render as text, never as HTML.

Worker ids, hosts and devices come from whatever registered in Redis; dead-letter
errors are job data; decision reasons come from the autoscaler. Each carries an
``<img onerror>`` that would set ``window.__xss`` if the page ever parsed it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from autoscaler.decisions import DecisionLog
from autoscaler.policy import Decision
from sluice import registry
from sluice.config import parse_config
from sluice.jobs import NewJob, Outcome
from sluice.queue import QueueClient
from tests.factories import worker_info
from tests.kit.chromium import CHROMIUM, FLAGS, gateway_process, sync_api, wait_js

pytestmark = [pytest.mark.system, pytest.mark.timeout(90)]
EVIL = '<img src=x onerror="window.__xss=1">'
CONFIG = {"models": {"m": {"handler": "synthetic", "buckets": [32, 128]}}}


def _hostile_data(r: redis.Redis) -> None:
    now = time.time()
    info = worker_info(
        id="w" + EVIL,
        host="h" + EVIL,
        device="cpu" + EVIL,
        started_at=now,
        heartbeat_at=now,
        service_rate=1.0,
        batch_size=1,
    )
    pipe = r.pipeline(transaction=False)
    for cmd in registry.heartbeat(info, 120):
        pipe.execute_command(*cmd)
    pipe.execute()
    q = QueueClient(r, dict(parse_config(CONFIG).models))
    q.submit("m", [NewJob("x", "32", 1)])
    job = q.claim("m", "w").jobs[0]
    q.complete("m", [Outcome.fail(job.id, "t" + EVIL, "msg" + EVIL)], "w")
    DecisionLog(r).record("m", Decision(1, 2, "reason" + EVIL, 2.0), None, 5.0)


@pytest.fixture
def gateway(redis_url: str, r: redis.Redis, tmp_path: Path) -> Iterator[str]:
    with gateway_process(CONFIG, redis_url, tmp_path) as url:
        _hostile_data(r)
        yield url


def test_worker_ids_errors_and_reasons_are_shown_as_text(gateway: str) -> None:
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            dialogs: list[str] = []

            def on_dialog(d: Any) -> None:
                dialogs.append(d.message)
                d.dismiss()

            page.on("dialog", on_dialog)
            page.goto(gateway + "/dashboard")
            wait_js(
                page,
                "() => window.sluiceDashboard && window.sluiceDashboard.polls >= 2",
                30,
                "two polls",
            )
            text = page.evaluate("() => document.body.innerText")
            # Each hostile string is on the page, as text...
            for shown in ("msg" + EVIL, "reason" + EVIL, "cpu" + EVIL):
                assert shown in text, shown
            # ...and none became an element or ran.
            assert page.evaluate("() => document.querySelectorAll('main img').length") == 0
            assert page.evaluate("() => window.__xss") is None
            assert dialogs == []
        finally:
            browser.close()
