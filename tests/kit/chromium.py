"""Headless Debian chromium for the browser tests: where it is, its flags, waiting.

Importing this skips the importing test module, with the reason, when there is
no chromium (``make install`` installs Debian's) or no playwright. Playwright
drives /usr/bin/chromium; it never downloads a browser.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from sluice.local.children import Children
from sluice.local.redis_server import free_port
from tests.waits import wait_http, wait_until

CHROMIUM = os.environ.get("SLUICE_CHROMIUM", "/usr/bin/chromium")
# Without the background-networking flags chromium keeps dialling hosts this
# sandbox cannot reach.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]

if not (shutil.which(CHROMIUM) or Path(CHROMIUM).is_file()):
    pytest.skip(
        f"no Chromium at {CHROMIUM} (make install puts Debian's there)", allow_module_level=True
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")


def wait_js(page: Any, expr: str, timeout_s: float, what: str) -> Any:
    """``wait_until`` the page's ``expr`` is truthy; a timeout says what the page knew."""
    try:
        return wait_until(lambda: page.evaluate(expr), timeout_s, what, every_s=0.25)
    except AssertionError as e:
        raise AssertionError(f"{e}; page: {page.evaluate(DIAGNOSE)}") from None


# What the page knew, for a failure message: polls, banner, chart points, workers.
DIAGNOSE = """() => ({
  polls: window.sluiceDashboard ? window.sluiceDashboard.polls : null,
  banner: document.getElementById("banner").textContent,
  auth: document.getElementById("auth-error").textContent,
  charts: [...document.querySelectorAll("[data-chart]")]
    .map((e) => e.dataset.chart + "=" + e.dataset.points),
  workers: [...document.querySelectorAll("[data-worker]")]
    .map((e) => e.dataset.worker + ":" + e.dataset.state),
})"""


@contextmanager
def gateway_process(config: dict[str, Any], redis_url: str, tmp_path: Path) -> Iterator[str]:
    """A real ``sluice gateway`` for ``config`` on a free port; yields its URL once
    healthy. Its log: ``<tmp_path>/logs/gateway.log``."""
    path = tmp_path / "sluice.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    children = Children(tmp_path / "logs")
    args = ["gateway", "--config", str(path), "--port", str(port), "--redis-url", redis_url]
    gateway = children.spawn("gateway", [*args, "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/healthz", gateway.proc, 30)
        yield url
    finally:
        children.stop(children.all, timeout_s=15)  # SIGTERM, then SIGKILL after 15 s
