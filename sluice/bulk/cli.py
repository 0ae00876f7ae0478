"""``sluice bulk``: submit a JSONL file and follow it, output, cancel (a client's
commands); ``sluice bulk worker`` is added by the bulk worker's package (bulkworker.cli)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sluice.cli_common import (
    ApiKeyOpt,
    ConfigOpt,
    fail,
    load_required,
)

if TYPE_CHECKING:
    from sluice.config import SluiceConfig

bulk_app = typer.Typer(help="Bulk jobs: a JSONL file run in the headroom.", no_args_is_help=True)
UrlOpt = Annotated[str | None, typer.Option(help="Gateway URL (default: the config's gateway).")]


def _gateway_url(url: str | None, config: Path | None) -> str:
    if url:
        return url
    cfg: SluiceConfig | None = load_required(config) if config else None
    host, port = (cfg.gateway.host, cfg.gateway.port) if cfg else ("127.0.0.1", 8000)
    return f"http://{host}:{port}"


@bulk_app.command("submit")
def submit_cmd(
    file: Annotated[
        Path, typer.Argument(help='JSONL: one {"input": ..., "custom_id": ...} a line; - = stdin.')
    ],  # noqa: E501
    model: Annotated[str, typer.Option("--model", "-m", help="Model name.")],
    url: UrlOpt = None,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Follow it with a progress bar.")
    ] = True,  # noqa: E501
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the output JSONL here when it ends."),
    ] = None,  # noqa: E501
    timeout_s: Annotated[float, typer.Option(help="How long to follow it.")] = 86400.0,
    config: ConfigOpt = None,
    api_key: ApiKeyOpt = None,
) -> None:
    """Upload a bulk file; with --wait (the default) show progress until it ends."""
    from sluice.bulk.follow import follow, write_output
    from sluice.client import Client, SluiceClientError

    data = sys.stdin.buffer.read() if str(file) == "-" else _read(file)
    with Client(_gateway_url(url, config), api_key=api_key) as c:
        try:
            view = c.bulk_submit(model, data)
        except SluiceClientError as e:
            fail(str(e))
        typer.echo(f"{view['id']}  {view['counts']['total']} lines  {view['state']}", err=True)
        if not wait:
            typer.echo(view["id"])
            return
        final = follow(c, view, timeout_s)
        if output is not None and final["state"] in ("completed", "cancelled", "failed"):
            write_output(c, final["id"], output)
        typer.echo(json.dumps(final))
        raise typer.Exit(0 if final["state"] == "completed" else 1)


def _read(file: Path) -> bytes:
    try:
        return file.read_bytes()
    except OSError as e:
        fail(f"cannot read {file}: {e.strerror}")


@bulk_app.command("status")
def status_cmd(
    bulk_id: str, url: UrlOpt = None, config: ConfigOpt = None, api_key: ApiKeyOpt = None
) -> None:
    """A bulk job's state, counts, rate and ETA (JSON)."""
    from sluice.client import Client, SluiceClientError

    with Client(_gateway_url(url, config), api_key=api_key) as c:
        try:
            typer.echo(json.dumps(c.bulk_get(bulk_id), indent=2))
        except SluiceClientError as e:
            fail(str(e))


@bulk_app.command("output")
def output_cmd(
    bulk_id: str,
    output: Annotated[Path | None, typer.Option("--output", "-o")] = None,
    url: UrlOpt = None,
    config: ConfigOpt = None,
    api_key: ApiKeyOpt = None,
) -> None:
    """The output JSONL of an ended bulk job (stdout, or --output FILE)."""
    from sluice.bulk.follow import write_output
    from sluice.client import Client, SluiceClientError

    with Client(_gateway_url(url, config), api_key=api_key) as c:
        try:
            write_output(c, bulk_id, output)
        except SluiceClientError as e:
            fail(str(e))


@bulk_app.command("cancel")
def cancel_cmd(
    bulk_id: str, url: UrlOpt = None, config: ConfigOpt = None, api_key: ApiKeyOpt = None
) -> None:
    """Stop feeding a bulk job; lines that have ended keep their output, the rest are cancelled."""
    from sluice.client import Client, SluiceClientError

    with Client(_gateway_url(url, config), api_key=api_key) as c:
        try:
            typer.echo(json.dumps(c.bulk_cancel(bulk_id)))
        except SluiceClientError as e:
            fail(str(e))
