"""``sluice admin dead-letters list|show|redrive|purge``, ``sluice admin retry`` and
``sluice admin purge`` (docs/adr/0153): calls of the gateway's admin REST API."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from sluice.admin.cli import (
    ADMIN_PATH,
    AdminKeyOpt,
    AdminUrlOpt,
    JsonOutOpt,
    admin_app,
    api,
    show_action,
)
from sluice.cli_common import ConfigOpt, fail

dead_app = typer.Typer(help="A model's dead letters: list, show, redrive, purge.")
admin_app.add_typer(dead_app, name="dead-letters", no_args_is_help=True)
ModelArg = Annotated[str, typer.Argument(help="Model name.")]
IdsOpt = Annotated[list[str] | None, typer.Option("--id", help="A job id (repeat for more).")]
ErrorTypeOpt = Annotated[str | None, typer.Option(help="Only those whose error has this type.")]
WorkerOpt = Annotated[str | None, typer.Option("--worker", help="Only those this worker last ran.")]
BucketOpt = Annotated[str | None, typer.Option(help="Only this bucket's.")]
PriorityOpt = Annotated[
    str | None, typer.Option(help="Only this priority's (high|normal|low|bulk).")
]
AllOpt = Annotated[bool, typer.Option("--all", help="Every dead letter of the model.")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]


def _ms(t: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t / 1000)) + "Z" if t else "-"


def _line(d: dict[str, Any]) -> str:
    err = d.get("error") or {}
    why = f"{err.get('type', '?')}: {err.get('message', '')}"[:80]
    worker = d["last_worker"] or "-"
    return f"{d['id']}  {_ms(d['failed_at_ms'])}  att {d['attempts']}  {worker}  {why}"


@dead_app.command("list")
def list_cmd(
    model: ModelArg,
    limit: Annotated[int, typer.Option(min=1, max=500, help="A page's size.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page.")] = None,
    url: AdminUrlOpt = None,
    key: AdminKeyOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOutOpt = False,
) -> None:
    """Dead letters, newest first: id, when, attempts, last worker, error."""
    page = api(url, key, config).get(
        f"{ADMIN_PATH}/models/{model}/dead-letters", limit=limit, cursor=cursor
    )
    if as_json:
        typer.echo(json.dumps(page, sort_keys=True))
        return
    for d in page["items"]:
        typer.echo(_line(d))
    more = f"; next page: --cursor {page['next_cursor']}" if page["next_cursor"] else ""
    typer.echo(f"{page['total']} dead letter(s){more}", err=True)


@dead_app.command("show")
def show_cmd(
    model: ModelArg,
    job_id: Annotated[str, typer.Argument(help="The job id.")],
    url: AdminUrlOpt = None,
    key: AdminKeyOpt = None,
    config: ConfigOpt = None,
) -> None:
    """One dead letter as JSON: error, attempts, last worker, times."""
    d = api(url, key, config).get(f"{ADMIN_PATH}/models/{model}/dead-letters/{job_id}")
    typer.echo(json.dumps(d, indent=2, sort_keys=True))


def _selection(ids: list[str] | None, every: bool, **filters: Any) -> tuple[dict[str, Any], str]:
    """The request body and how to name it; exits unless exactly one way is chosen."""
    where = {k: v for k, v in filters.items() if v is not None}
    chosen = [bool(ids), bool(where), every]
    if sum(chosen) != 1:
        fail(
            "choose the dead letters: --id (repeatable), a filter (--error-type, "
            "--worker, --bucket, --priority) or --all"
        )
    if ids:
        return {"ids": ids}, f"{len(ids)} dead letter(s)"
    if where:
        return {"filter": where}, f"the dead letters with {where}"
    return {}, "every dead letter"


def _dead_action_cmd(action: str, doc: str) -> Callable[..., None]:
    """``dead-letters redrive`` and ``purge``: one option list, one action each."""

    def cmd(
        model: ModelArg,
        ids: IdsOpt = None,
        error_type: ErrorTypeOpt = None,
        worker: WorkerOpt = None,
        bucket: BucketOpt = None,
        priority: PriorityOpt = None,
        every: AllOpt = False,
        yes: YesOpt = False,
        url: AdminUrlOpt = None,
        key: AdminKeyOpt = None,
        config: ConfigOpt = None,
        as_json: JsonOutOpt = False,
    ) -> None:
        body, what = _selection(
            ids, every, error_type=error_type, last_worker=worker, bucket=bucket, priority=priority
        )
        if not yes:
            typer.confirm(f"{action} {what} of {model}?", abort=True)
        answer = api(url, key, config).post(
            f"{ADMIN_PATH}/models/{model}/dead-letters/{action}", body
        )
        show_action(answer, as_json)

    cmd.__name__ = f"{action}_cmd"
    cmd.__doc__ = doc
    return cmd


redrive_cmd = dead_app.command("redrive")(
    _dead_action_cmd("redrive", "Put dead letters back in their queue (same ids, attempts reset).")
)
purge_dead_cmd = dead_app.command("purge")(_dead_action_cmd("purge", "Delete dead letters."))


@admin_app.command("retry")
def retry_cmd(
    job_id: Annotated[str, typer.Argument(help="A failed job's id.")],
    url: AdminUrlOpt = None,
    key: AdminKeyOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOutOpt = False,
) -> None:
    """Retry one failed job now: back in its queue, same id, attempts reset."""
    show_action(api(url, key, config).post(f"/v1/jobs/{job_id}/retry"), as_json)


@admin_app.command("purge")
def purge_queue_cmd(
    model: ModelArg,
    priority: PriorityOpt = None,
    bucket: BucketOpt = None,
    yes: YesOpt = False,
    url: AdminUrlOpt = None,
    key: AdminKeyOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOutOpt = False,
) -> None:
    """Empty a model's queue (or one priority's or bucket's part): every queued job
    ends cancelled for whoever waits on it."""
    body = {k: v for k, v in (("priority", priority), ("bucket", bucket)) if v is not None}
    if not yes:
        what = ", ".join(f"{k} {v}" for k, v in body.items()) or "all"
        typer.confirm(f"cancel the queued jobs of {model} ({what})?", abort=True)
    path = f"{ADMIN_PATH}/models/{model}/queue/purge"
    show_action(api(url, key, config).post(path, body), as_json)
