"""``sluice gateway`` and ``sluice keys``."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Annotated

import typer

from sluice.cli_common import (
    EXIT_CONFIG,
    ConfigOpt,
    RedisUrlOpt,
    check_setting,
    fail,
    load_required,
    redis_url,
)
from sluice.envnames import CONFIG_ENV, REDIS_URL_ENV
from sluice.errors import ConfigError

if TYPE_CHECKING:
    from sluice.config import GatewayConfig


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("gateway")(gateway_cmd)
    keys_app = typer.Typer(
        help="API keys (see docs/config.md, Access control).", no_args_is_help=True
    )
    keys_app.command("new")(keys_new_cmd)
    app.add_typer(keys_app, name="keys")


def gateway_cmd(
    config: ConfigOpt = None,
    host: Annotated[str | None, typer.Option(help="Bind address (default: the file's).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: the file's).")] = None,
    workers: Annotated[int, typer.Option(min=1, help="uvicorn worker processes.")] = 1,
    redis_url_opt: RedisUrlOpt = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
) -> None:
    """Run the REST gateway (FastAPI under uvicorn, uvloop + httptools).

    With gateway.admin_port set, /metrics, /dashboard and /v1/admin are served on
    that port only, by a second server in the same process.
    """
    import uvicorn

    from sluice.apikeys import load_keyring

    cfg = load_required(config)
    assert config is not None
    try:  # a bad keys file or a missing env var: one line, exit 2, before binding
        load_keyring(cfg.auth)
    except ConfigError as e:
        fail(str(e), EXIT_CONFIG)
    # Worker processes rebuild the app from the environment (uvicorn's factory);
    # the Redis URL (maybe with a password) goes there, never onto a command line.
    os.environ[CONFIG_ENV] = str(config.resolve())
    os.environ[REDIS_URL_ENV] = url = redis_url(redis_url_opt, cfg)
    check_setting(url, cfg)  # one that can never work: exit 2 before binding
    if cfg.gateway.admin_port is not None:
        _serve_with_admin(cfg.gateway, host, port, workers, log_level)
        return
    uvicorn.run(
        "gateway.app:app_from_env",
        factory=True,
        host=host or cfg.gateway.host,
        port=port or cfg.gateway.port,
        workers=workers,
        loop="uvloop",
        http="httptools",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=5,
    )


def _serve_with_admin(
    gw: GatewayConfig, host: str | None, port: int | None, workers: int, log_level: str
) -> None:
    import uvloop

    from gateway.app import app_from_env
    from gateway.serve import serve_both, servers

    if workers > 1:
        fail(
            "--workers > 1 with gateway.admin_port: run one gateway process per container",
            EXIT_CONFIG,
        )
    assert gw.admin_port is not None
    both = servers(
        app_from_env(), host or gw.host, port or gw.port, gw.admin_host, gw.admin_port, log_level
    )
    # serve_both re-raises the signal it stopped for, like uvicorn.run: SIGINT's is
    # a KeyboardInterrupt, which uvicorn.run swallows too.
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(serve_both(both))


def keys_new_cmd(
    name: Annotated[str, typer.Argument(help="The key's name: the owner of its jobs.")],
    admin: Annotated[bool, typer.Option(help="May call /metrics, /dashboard, /v1/admin.")] = False,
) -> None:
    """Print a fresh API key (shown once, never stored) and the line for auth.keys."""
    from sluice.apikeys import config_line, new_key
    from sluice.config import KEY_NAME_RE

    if not KEY_NAME_RE.match(name):
        fail(f"key name {name!r} must be 1-64 letters, digits, '_', '.', '@' or '-'", EXIT_CONFIG)
    key = new_key()
    typer.echo(f"key (give it to {name}; it is not stored anywhere and cannot be shown again):")
    typer.echo(f"  {key}")
    typer.echo("add this line under auth.keys in the config (or to the keys file / env var):")
    typer.echo(f"  {config_line(name, key, admin)}")
