"""The ``sluice`` command line.

Core commands live here (``redis``, ``status``, ``submit``, ``up``, and the
client's ``bulk`` commands); the packages named in ``PLUGINS`` (the process
packages gateway, workers, autoscaler, notifier and bulkworker, and the
measurement package sluicebench) add their own through a ``register(app,
bench_app)`` function in their ``cli`` module, imported only if that package is
installed: the only place sluice/ imports a process package. Heavy imports
(torch, uvicorn, rq) happen inside commands, never at start-up, and ``main``
imports only the plugin its command needs (``OWNERS``); ``sluice.cli.app``
has them all.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Annotated

import typer

from sluice.cli_common import (
    EXIT_CONFIG,
    EXIT_UNAVAILABLE,
    ApiKeyOpt,
    ConfigOpt,
    RedisUrlOpt,
    check_redis,
    fail,
    load_required,
    redis_url,
    stop_event_on_signals,
)
from sluice.errors import SluiceError

_app = typer.Typer(
    name="sluice",
    help="Queue-based load balancer and autoscaler for ML model serving.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
_bench_app = typer.Typer(help="Benchmarks: print a table and write JSON.", no_args_is_help=True)
_app.add_typer(_bench_app, name="bench")


def _add_bulk(app: typer.Typer, bench_app: typer.Typer) -> None:
    from sluice.bulk.cli import bulk_app

    app.add_typer(bulk_app, name="bulk")


def _add_admin(app: typer.Typer, bench_app: typer.Typer) -> None:
    from sluice.admin.cli import admin_app

    app.add_typer(admin_app, name="admin")


@_app.command("redis")
def redis_cmd(
    port: Annotated[int, typer.Option(help="Port (0 = a free one).")] = 0,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Keep an append-only file here.")
    ] = None,
    appendfsync: Annotated[
        str, typer.Option(help="With --data-dir: always, everysec or no (see docs/reliability).")
    ] = "everysec",
    replicas: Annotated[
        int, typer.Option(min=0, max=8, help="Replicas of the primary (with --sentinels).")
    ] = 0,
    sentinels: Annotated[
        int,
        typer.Option(
            min=0,
            max=9,
            help="Sentinels watching the primary: prints a "
            "redis+sentinel:// URL; kill the primary to see a failover.",
        ),
    ] = 0,
) -> None:
    """Run a private redis-server on loopback; prints its URL first.

    With --replicas N --sentinels M: a primary, N replicas and M sentinels
    (all loopback, nothing on disk), and the redis+sentinel:// URL to use.
    """
    from sluice.errors import RedisBinaryNotFound
    from sluice.local.redis_server import start_redis
    from sluice.local.redis_topology import SentinelGroup

    if bool(replicas) != bool(sentinels):
        fail(
            "--replicas and --sentinels go together (e.g. --replicas 1 --sentinels 3)", EXIT_CONFIG
        )
    if sentinels and (data_dir or port):
        fail("--data-dir and --port are for one server, not a Sentinel group", EXIT_CONFIG)
    # Handlers first: a supervisor may send SIGTERM as soon as it reads the URL.
    stop = stop_event_on_signals()
    try:
        if sentinels:
            group = SentinelGroup(replicas, sentinels).start()
            procs = [s.proc for s in group.servers] + [s.proc for s in group.sentinels]
            url, stopper = group.url, group.stop
        else:
            server = start_redis(data_dir=data_dir, port=port or None, appendfsync=appendfsync)
            procs, url, stopper = [server.proc], server.url, server.stop
    except RedisBinaryNotFound as e:
        fail(str(e), EXIT_CONFIG)
    except SluiceError as e:
        fail(str(e))
    print(url, flush=True)
    try:
        while not stop.wait(0.5):
            # One server: its exit is the end. A group outlives a killed node (that
            # is what it is for) and ends only when every process is gone.
            gone = [p is None or p.poll() is not None for p in procs]
            if all(gone) if sentinels else any(gone):
                fail("redis-server exited unexpectedly")
    finally:
        stopper()


@_app.command("status")
def status_cmd(
    job_id: Annotated[str | None, typer.Argument(help="A job id to show.")] = None,
    config: ConfigOpt = None,
    redis_url_opt: RedisUrlOpt = None,
) -> None:
    """Queues per model and bucket, live workers, or one job."""
    from sluice.errors import JobNotFound, RedisUnavailable
    from sluice.queue import QueueClient
    from sluice.queue.client import connect
    from sluice.status import print_status

    cfg = load_required(config)
    url = redis_url(redis_url_opt, cfg)
    check_redis(url, cfg)
    try:
        print_status(QueueClient(connect(url), dict(cfg.models)), cfg, job_id)
    except JobNotFound as e:
        fail(str(e))
    except RedisUnavailable as e:
        fail(str(e), EXIT_UNAVAILABLE)


@_app.command("submit")
def submit_cmd(
    model: Annotated[str, typer.Argument(help="Model name.")],
    inputs: Annotated[list[str] | None, typer.Argument(help="Input texts.")] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="One input per line (JSON or text); - = stdin."),
    ] = None,
    url: Annotated[
        str | None, typer.Option(help="Gateway URL (default: the file's gateway).")
    ] = None,
    priority: Annotated[str | None, typer.Option(help="high, normal or low.")] = None,
    deadline_ms: Annotated[int | None, typer.Option(help="Give up if not started by then.")] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for results.")] = True,
    timeout_s: Annotated[float, typer.Option(help="How long to wait for results.")] = 300.0,
    as_json: Annotated[bool, typer.Option("--json-out", help="Print JSON, not a table.")] = False,
    config: ConfigOpt = None,
    api_key: ApiKeyOpt = None,
) -> None:
    """Submit inputs to a model through the gateway and show the jobs (and results)."""
    from sluice.submit_cli import read_inputs, run_submit

    values = read_inputs(inputs or [], file)
    if not values:
        fail("nothing to submit: give inputs as arguments or --file")
    if url is None:
        cfg = load_required(config) if config else None
        host, port = (cfg.gateway.host, cfg.gateway.port) if cfg else ("127.0.0.1", 8000)
        url = f"http://{host}:{port}"
    code = run_submit(
        url,
        model,
        values,
        priority=priority,
        deadline_ms=deadline_ms,
        wait=wait,
        timeout_s=timeout_s,
        as_json=as_json,
        api_key=api_key,
    )
    raise typer.Exit(code)


@_app.command("up")
def up_cmd(
    config: ConfigOpt = Path("examples/sluice.yaml"),
    redis_url_opt: RedisUrlOpt = None,
    host: Annotated[str | None, typer.Option(help="Gateway bind address.")] = None,
    port: Annotated[int | None, typer.Option(help="Gateway port.")] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Keep the embedded Redis's AOF here.")
    ] = None,
) -> None:
    """Start Redis, a gateway and the autoscaler with its workers; Ctrl-C stops all."""
    from sluice.local.up_cli import run_up

    cfg = load_required(config)
    assert config is not None
    run_up(cfg, config, redis_url_opt, host, port, data_dir)


PLUGINS = (
    "gateway.cli",
    "workers.cli",
    "autoscaler.cli",
    "notifier.cli",
    "bulkworker.cli",
    "sluicebench.cli",
)
# Which plugins a top-level command needs. A process started as ``sluice worker``
# imports the workers' command alone, not every package's (half its start-up CPU,
# paid by every child ``sluice up`` starts); anything else (help, a typo, a core
# command's sibling) registers them all. tests/pure/cli checks this table against
# what the plugins really register.
OWNERS: dict[str, tuple[str, ...]] = {
    "gateway": ("gateway.cli",),
    "keys": ("gateway.cli",),
    "worker": ("workers.cli",),
    "autoscaler": ("autoscaler.cli",),
    "simulate": ("autoscaler.cli",),
    "notifier": ("notifier.cli",),
    "bulk": ("sluice.bulk", "bulkworker.cli"),
    "admin": ("sluice.admin",),
    "bench": ("sluicebench.cli",),
    "redis": (),
    "status": (),
    "submit": (),
    "up": (),
}
_BUILTIN = {"sluice.bulk": _add_bulk, "sluice.admin": _add_admin}
_registered: set[str] = set()


ALL = ("sluice.bulk", "sluice.admin", *PLUGINS)


def register(names: tuple[str, ...] = ALL) -> typer.Typer:
    """Registers the named plugins' commands on the app (each once) and returns it."""
    for name in names:
        if name in _registered:
            continue
        _registered.add(name)
        if name in _BUILTIN:
            _BUILTIN[name](_app, _bench_app)
        elif importlib.util.find_spec(name.split(".")[0]) and importlib.util.find_spec(name):
            importlib.import_module(name).register(_app, _bench_app)
    return _app


def needed(argv: list[str]) -> tuple[str, ...] | None:
    """The plugins the command line ``argv`` (without the program) needs; None: all."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return OWNERS.get(first) if first is not None else None


def __getattr__(name: str) -> typer.Typer:
    # ``from sluice.cli import app`` (tests, tools) gets every command; only
    # ``main`` registers no more than its command line needs.
    if name == "app":
        return register()
    if name == "bench_app":
        register()
        return _bench_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    wanted = needed(sys.argv[1:])
    register(ALL if wanted is None else wanted)
    try:
        _app()
    except SluiceError as e:
        # Raised past typer's own handling: still one line, never a traceback.
        print(f"sluice: error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
