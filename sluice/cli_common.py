"""Options and helpers every ``sluice`` command shares.

Importing this module costs typer alone: the config schema (pydantic) and the
Redis client are imported by the helpers that use them, so a process that only
prints its help, or a command that needs neither, never pays for them.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from sluice.envnames import CONFIG_ENV, REDIS_URL_ENV
from sluice.errors import ConfigError, RedisUnavailable
from sluice.redact import redact, redact_url

if TYPE_CHECKING:
    from sluice.config import SluiceConfig

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", envvar=CONFIG_ENV, help="Sluice config file (YAML)."),
]
RedisUrlOpt = Annotated[
    str | None,
    typer.Option("--redis-url", envvar=REDIS_URL_ENV, help="Redis URL (overrides the file)."),
]
# The notifier's and the bulk worker's (the autoscaler and workers have their own).
MetricsPortOpt = Annotated[
    int | None,
    typer.Option(min=0, max=65535, help="Prometheus port (0 = none; default: the file's)."),
]
JsonOpt = Annotated[
    Path | None, typer.Option("--json", help="Write machine-readable results to this file.")
]
ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        envvar="SLUICE_API_KEY",
        show_envvar=True,
        help="API key, when the gateway has keys configured.",
    ),
]

EXIT_CONFIG = 2
EXIT_UNAVAILABLE = 3


def fail(message: str, code: int = 1) -> NoReturn:
    """One clear line on stderr and a non-zero exit, never a traceback."""
    typer.echo(f"sluice: error: {message}", err=True)
    raise typer.Exit(code)


def load(config: Path | None, required: bool = True) -> SluiceConfig | None:
    from sluice.config import load_config

    if config is None:
        if required:
            fail(f"no config file: pass --config or set {CONFIG_ENV}", EXIT_CONFIG)
        return None
    try:
        return load_config(config)
    except ConfigError as e:
        fail(str(e), EXIT_CONFIG)


def load_required(config: Path | None) -> SluiceConfig:
    cfg = load(config, required=True)
    assert cfg is not None
    return cfg


def redis_url(cli_value: str | None, cfg: SluiceConfig | None) -> str:
    from sluice.config import resolve_redis_url

    return resolve_redis_url(cli_value, cfg)


def _never_works(url: str, cfg: SluiceConfig | None) -> str:
    """The URL's kind, or ConfigError for what is wrong without reaching Redis."""
    from sluice.connection import parse_url
    from sluice.queue.client import refuse_cluster_durability

    kind = parse_url(url).kind
    refuse_cluster_durability(kind == "cluster", dict(cfg.models) if cfg else {})
    return kind


def check_setting(url: str, cfg: SluiceConfig | None, timeout_s: float = 2.0) -> None:
    """Exit 2 with one line for a Redis setting that can never work, before anything
    starts: a malformed URL, replica durability on a cluster, and for Sentinel and
    Cluster URLs what :func:`sluice.connection.check` finds. An outage of a plain
    server is left to the caller (a gateway starts and says so on /readyz; a worker
    waits)."""
    import redis

    from sluice.connection import check

    try:
        if _never_works(url, cfg) != "redis":
            check(url, timeout_s)
    except ConfigError as e:
        fail(f"redis: {redact(str(e))}", EXIT_CONFIG)
    except (redis.exceptions.RedisError, OSError):
        pass  # reachable settings, Redis not answering right now: the caller's to handle


def check_redis(url: str, cfg: SluiceConfig | None = None, timeout_s: float = 2.0) -> None:
    """Fail with one line when Redis cannot be used: exit 2 for a setting that can
    never work (as :func:`check_setting`), exit 3 when a server does not answer."""
    import redis

    from sluice.connection import check

    try:
        _never_works(url, cfg)
        check(url, timeout_s)
    except ConfigError as e:
        fail(f"redis: {redact(str(e))}", EXIT_CONFIG)
    except (redis.exceptions.RedisError, OSError, ValueError) as e:
        # The URL may carry a password (redis://:pw@host): never print it.
        fail(f"cannot reach Redis at {redact_url(url)}: {redact(str(e))}", EXIT_UNAVAILABLE)
    except RedisUnavailable as e:
        fail(redact(str(e)), EXIT_UNAVAILABLE)


def write_json(path: Path | None, data: Any) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"wrote {path}", file=sys.stderr)


def stop_event_on_signals() -> threading.Event:
    """An Event set by SIGTERM or SIGINT, safe to wait on in the main thread.

    A handler runs in the main thread between two bytecodes, maybe while that
    thread is inside ``Event.wait`` holding the Event's (non-reentrant) lock:
    calling ``set()`` there can deadlock the process forever. The handler hands
    the ``set()`` to a short-lived thread instead, which takes the lock once the
    main thread lets go of it.
    """
    stop = threading.Event()

    def handler(_signum: int, _frame: object) -> None:
        threading.Thread(target=stop.set, name="stop-signal", daemon=True).start()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)
    return stop
