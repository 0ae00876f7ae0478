"""``sluice notifier``."""

from __future__ import annotations

import typer

from sluice.cli_common import (
    EXIT_CONFIG,
    ConfigOpt,
    MetricsPortOpt,
    RedisUrlOpt,
    check_redis,
    fail,
    load_required,
    redis_url,
    stop_event_on_signals,
)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("notifier")(notifier_cmd)


def notifier_cmd(
    config: ConfigOpt = None,
    redis_url_opt: RedisUrlOpt = None,
    metrics_port: MetricsPortOpt = None,
) -> None:
    """Deliver completion webhooks: claim due deliveries, sign, send, retry (run any number)."""
    import logging

    from notifier.loop import run
    from sluice.errors import ConfigError

    stop = stop_event_on_signals()
    cfg = load_required(config)
    if metrics_port is not None:  # the option wins over webhooks.metrics_port
        hooks = cfg.webhooks.model_copy(update={"metrics_port": metrics_port})
        cfg = cfg.model_copy(update={"webhooks": hooks})
    url = redis_url(redis_url_opt, cfg)
    check_redis(url, cfg)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        run(cfg, url, stop.is_set)
    except ConfigError as e:
        fail(str(e), EXIT_CONFIG)
