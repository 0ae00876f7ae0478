"""The dashboard in headless Chromium against a real ``sluice up`` under load.

Debian's chromium (``make install`` installs it) driven by Playwright; never a
downloaded browser. One stack of synthetic workers, a bounded open-loop load
from ``sluice bench load`` on loopback, one dead-lettered job, then: the page
loads with no console errors, every chart draws non-empty data (counted by the
page and read off the canvas), a ``sluice worker`` started mid-test appears in
the workers grid, the dead letter's Redrive button (after a confirmation) puts it
back and it succeeds, the Pause button pauses the model (its badge shows, GET
/v1/models says so) and Resume resumes it, and a screenshot is saved (path printed). API keys are
configured, so the page first asks for the admin key: a non-admin key is
refused with a clear message, the admin key opens it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.apikeys import hash_key
from sluice.config import load_config
from sluice.jobs import NewJob, Outcome
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.kit.chromium import CHROMIUM, FLAGS, sync_api, wait_js
from tests.kit.http import HTTP
from tests.kit.upstack import launch, shut_down
from tests.waits import wait_until

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
CHARTS = ("backlog", "throughput", "wait", "e2e", "replicas")
ADMIN_KEY, USER_KEY = "sk_browser-admin-0123456789", "sk_browser-user-0123456789"
CONFIG = {
    "models": {
        "synthetic": {
            "handler": "synthetic",
            "params": {"base_ms": 3, "per_token_ms": 0.4},
            "buckets": [32, 128, 512],
            "cost": {"method": "words"},
            "batching": {"max_batch": 8, "max_batch_tokens": 2048, "lease_s": 5},
            "autoscaling": {
                "min_replicas": 1,
                "max_replicas": 2,
                "period_s": 1,
                "cold_start_s": 1,
                "p99_wait_slo_ms": 250,
            },
        },
    },
    "worker": {"heartbeat_s": 0.3, "heartbeat_ttl_s": 3},
    "bulk": {"rq_workers": 0},  # no bulk job here: one process fewer to start
    "autoscaler": {"drain_timeout_s": 10},
    "auth": {
        "keys": [
            {"name": "ops", "hash": hash_key(ADMIN_KEY), "admin": True},
            {"name": "app", "hash": hash_key(USER_KEY)},
        ]
    },
}


def _stop(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, wait_s: float = 20) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    up = launch(CONFIG, tmp_path_factory.mktemp("dash"))
    try:
        banner = (line.split() for line in up.printed if line.strip().startswith("dashboard "))
        dashboard = next((words[1] for words in banner), "")
        url, redis_url, path = up.gateway, up.redis_url, up.config_path
        assert dashboard == url + "/dashboard"
        # Bounded open loop on loopback: 40 jobs/s for at most 45 s.
        load = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sluice",
                "bench",
                "load",
                "--url",
                url,
                "-m",
                "synthetic",
                "--rate",
                "40",
                "--duration-s",
                "45",
                "--no-progress",
                "--timeout-s",
                "20",
                "--api-key",
                USER_KEY,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        yield {"url": url, "dashboard": dashboard, "redis_url": redis_url, "config": path}
        _stop(load, signal.SIGINT, 10)
    finally:
        shut_down(up)


def _dead_letter(redis_url: str, config: Path) -> str:
    """Fail one job for good (the test holds it; a worker may win the race, so retry)."""
    q = QueueClient(connect(redis_url), dict(load_config(config).models))
    for _ in range(100):
        [sub] = q.submit(
            "synthetic", [NewJob(input="poison", bucket="32", cost=1, priority="high")]
        )
        batch = q.claim("synthetic", "browser-test", max_batch=1, buckets=["32"])
        if [j.id for j in batch.jobs] == [sub.id]:
            q.complete("synthetic", [Outcome.fail(sub.id, "poison_input", "cannot embed poison")])
            return sub.id
        if batch.jobs:  # took someone else's job: give it back unharmed
            q.complete("synthetic", [Outcome(j.id, "release", None) for j in batch.jobs])
    raise AssertionError("could not claim a job of our own in 100 tries")


def _log_in(page: Any) -> None:
    """The key form: a non-admin key is refused in words, the admin key opens the page."""
    page.wait_for_selector("#auth:not([hidden])", timeout=10_000)
    page.fill("#auth-key", USER_KEY)
    page.click("#auth-form button")
    wait_js(
        page,
        "document.getElementById('auth-error').textContent.includes('not an admin key')",
        10,
        "the 403 message",
    )
    page.fill("#auth-key", ADMIN_KEY)
    page.click("#auth-form button")
    page.wait_for_selector("#auth[hidden]", state="attached", timeout=10_000)


def _redrive_from_the_page(page: Any, stack: dict[str, Any], dead_id: str) -> None:
    """The dead letters' Redrive button asks first, then puts the job back: it
    succeeds under its own id, and the audit trail names the page's admin key."""
    asked: list[str] = []

    def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", answer)
    page.click('section.model [data-action="redrive"]')
    wait_js(
        page,
        "document.querySelector('section.model [data-role=\"action-result\"]')"
        ".textContent.startsWith('Redrive all: 1 ')",
        15,
        "the redrive's answer",
    )
    assert asked and "dead letter" in asked[0]
    q = QueueClient(connect(stack["redis_url"]), dict(load_config(stack["config"]).models))
    try:  # the job has no owner (the test queued it): read it where it is kept
        wait_until(lambda: q.get(dead_id).status == "succeeded", what="the redriven job")
    finally:
        q.redis.close()
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    audit = HTTP.get(f"{stack['url']}/v1/admin/audit", headers=admin, timeout=10).json()
    audit = audit["entries"]
    assert (audit[0]["actor"], audit[0]["action"], audit[0]["count"]) == (
        "ops",
        "dead_letters.redrive",
        1,
    )


def _pause_and_resume_from_the_page(page: Any, stack: dict[str, Any]) -> None:
    """Pause (after a confirmation): the badge shows once the feed says so, and the
    API agrees; then Resume (ADR 0154)."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}

    def paused() -> bool:
        models = HTTP.get(f"{stack['url']}/v1/models", headers=admin, timeout=10).json()
        return bool(models["data"][0]["paused"])

    asked: list[str] = []

    def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    badge = "document.querySelector('section.model [data-role=\"paused\"]')"
    page.once("dialog", answer)
    page.click('section.model [data-action="pause"]')
    wait_js(page, f"!{badge}.hidden && {badge}.textContent.startsWith('PAUSED')", 15, "the badge")
    assert asked and "stop claiming" in asked[0] and paused()
    page.once("dialog", answer)
    page.click('section.model [data-action="resume"]')
    wait_js(page, f"{badge}.hidden", 15, "the badge to go")
    assert len(asked) == 2 and not paused()


def _sort_and_switch(page: Any) -> None:
    """The workers sort by id on request; the backlog switches to cost and still draws."""
    page.select_option('select[aria-label="sort workers"]', "id")
    ids = page.eval_on_selector_all("[data-worker]", "(els) => els.map((e) => e.dataset.worker)")
    assert len(ids) >= 2 and ids == sorted(ids)
    page.click('[data-chart="backlog"] >> xpath=.. >> button:has-text("cost")')
    wait_js(
        page,
        "document.querySelector('[data-chart=\"backlog\"]').dataset.unit === 'cost'",
        5,
        "the backlog in cost",
    )
    assert int(page.get_attribute('[data-chart="backlog"]', "data-points") or 0) > 0


PAINTED = """(role) => {
  const c = document.querySelector(`[data-chart="${role}"] canvas`);
  const ctx = c.getContext("2d");
  const px = ctx.getImageData(0, 0, c.width, c.height).data;
  const seen = new Set();
  for (let i = 0; i < px.length; i += 4 * 7) seen.add(px[i] << 16 | px[i + 1] << 8 | px[i + 2]);
  return seen.size;
}"""


def test_dashboard_live_under_load(stack: dict[str, Any]) -> None:
    dead_id = _dead_letter(stack["redis_url"], stack["config"])
    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1600, "height": 1200})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(stack["dashboard"], wait_until="load")
        _log_in(page)
        # Chromium logs the refused fetches themselves (401 without a key, 403 with the
        # user's); those were the point of the log-in. Nothing else may be logged.
        assert all("401" in e or "403" in e for e in errors), errors
        errors.clear()
        wait_js(
            page,
            "window.sluiceDashboard && window.sluiceDashboard.polls >= 2",
            15,
            "the first polls",
        )
        points_js = (
            "(roles) => roles.map((r) => +(document.querySelector("
            '`[data-chart="${r}"]`)?.dataset.points || 0))'
        )
        wait_js(
            page,
            f"({points_js})({list(CHARTS)!r}).every((n) => n > 0)",
            30,
            "every chart to draw data",
        )
        for role in CHARTS:
            assert page.evaluate(PAINTED, role) > 3, f"{role} chart canvas is blank"

        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sluice",
                "worker",
                "--config",
                str(stack["config"]),
                "-m",
                "synthetic",
                "--worker-id",
                "mid-test-worker",
                "--redis-url",
                stack["redis_url"],
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_js(
                page,
                "!!document.querySelector('[data-worker=\"mid-test-worker\"]')",
                20,
                "the new worker's tile",
            )
            state = page.get_attribute('[data-worker="mid-test-worker"]', "data-state")
            assert state in ("starting", "ready")
            _sort_and_switch(page)
            dead = page.text_content('[data-role="dead-count"]')
            assert dead is not None and int(dead.replace(",", "")) >= 1
            assert "cannot embed poison" in (page.text_content("section.model .dead") or "")
            _redrive_from_the_page(page, stack, dead_id)
            _pause_and_resume_from_the_page(page, stack)
            assert page.text_content('[data-role="verdict"]')
            ARTIFACTS.mkdir(exist_ok=True)
            shot = ARTIFACTS / "dashboard.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"\ndashboard screenshot: {shot}")
        finally:
            _stop(worker)
        browser.close()
    assert errors == [], errors
    assert dead_id.startswith("synthetic.")
