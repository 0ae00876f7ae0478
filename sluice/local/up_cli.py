"""The foreground part of ``sluice up``: banner, live status, clean shutdown."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live

from sluice.cli_common import check_redis, fail, stop_event_on_signals
from sluice.config import SluiceConfig
from sluice.cores import describe
from sluice.errors import RedisUnavailable, SluiceError
from sluice.local.live import LiveStatus
from sluice.local.up import Stack, StackUrls
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.redact import redact, redact_url


def curl_example(gateway: str, cfg: SluiceConfig) -> str:
    model = next((m for m, c in cfg.models.items() if c.handler == "embedding"), None)
    model = model or next(iter(cfg.models))
    auth = cfg.auth
    keyed = bool(auth.keys or auth.keys_file or auth.keys_env)
    header = '-H "Authorization: Bearer $SLUICE_API_KEY" ' if keyed else ""
    return (
        f"curl -s -X POST {gateway}/v1/models/{model}/predict {header}"
        "-H 'Content-Type: application/json' -d '{\"input\": \"Sluice is up\"}'"
    )


def banner(urls: StackUrls, cfg: SluiceConfig) -> str:
    return "\n".join(
        [
            "Sluice is up.",
            f"  gateway  {urls.gateway}",
            f"  docs     {urls.gateway}/docs   metrics {urls.admin or urls.gateway}/metrics",
            f"  dashboard {urls.admin or urls.gateway}/dashboard",
            f"  redis    {redact_url(urls.redis)}",
            f"  models   {', '.join(cfg.models)}",
            f"  logs     {urls.logs}",
            *(f"  {name} metrics {url}" for name, url in urls.metrics),
            *(
                [f"  webhooks signed with the secret in {urls.webhook_secret}"]
                if urls.webhook_secret
                else []
            ),
            "Try:",
            f"  {curl_example(urls.gateway, cfg)}",
            "Ctrl-C drains the workers and stops everything.",
        ]
    )


def _watch(stack: Stack, status: LiveStatus, stop: threading.Event, console: Console) -> str:
    """Refresh the status line until stop; returns why it ended."""
    interactive = console.is_terminal
    last_print = 0.0
    with (
        Live(console=console, auto_refresh=False, transient=True)
        if interactive
        else _Null() as live
    ):
        while not stop.wait(1.0):
            dead = stack.dead_child()
            if dead:
                return f"{dead.name} exited unexpectedly; see {stack.log_dir / dead.name}.log"
            try:
                line = status.render()
            except (RedisUnavailable, SluiceError) as e:
                line = f"status unavailable: {redact(str(e))}"
            if interactive:
                live.update(line, refresh=True)
            elif time.monotonic() - last_print >= 10:
                print(line, flush=True)
                last_print = time.monotonic()
    return ""


class _Null:
    def __enter__(self) -> _Null:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, *a: object, **k: object) -> None:
        return None


def run_up(
    cfg: SluiceConfig,
    config_path: Path,
    redis_url: str | None,
    host: str | None,
    port: int | None,
    data_dir: Path | None,
) -> None:
    if redis_url:
        check_redis(redis_url, cfg)
    stack = Stack(cfg, config_path)
    stop = stop_event_on_signals()
    console = Console()
    reason = ""
    try:
        print(
            "starting Redis, the gateway, the webhook notifier, the autoscaler and its workers ...",
            flush=True,
        )
        print("cores: " + "; ".join(describe(cfg)), flush=True)
        urls = stack.start(redis_url, host or cfg.gateway.host, port or cfg.gateway.port, data_dir)
        print(banner(urls, cfg), flush=True)
        status = LiveStatus(QueueClient(connect(urls.redis), dict(cfg.models)), cfg)
        reason = _watch(stack, status, stop, console)
    except SluiceError as e:
        reason = redact(str(e))
    finally:
        print("stopping: draining workers ...", flush=True)
        killed = stack.stop(cfg.autoscaler.drain_timeout_s + 10)
        print(
            "stopped" + (f" (killed {len(killed)} stuck processes)" if killed else ""), flush=True
        )
    if reason:
        fail(reason)
    sys.exit(0)
