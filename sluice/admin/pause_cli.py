"""``sluice admin pause|resume MODEL``: a model's workers stop claiming, or claim
again (ADR 0154), through the gateway's admin routes (ADR 0151)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from sluice.admin.cli import (
    ADMIN_PATH,
    AdminKeyOpt,
    AdminUrlOpt,
    JsonOutOpt,
    admin_app,
    api,
)
from sluice.cli_common import ConfigOpt

ModelArg = Annotated[str, typer.Argument(help="A model named in the config.")]


def _say(answer: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(answer, sort_keys=True))
        return
    model, changed = answer["model"], bool(answer["count"])
    if answer["action"] == "resume":
        typer.echo(f"{model}: resumed" if changed else f"{model}: was not paused")
        return
    refusing = "refusing new jobs" if answer.get("refuse_submits") else "queueing new jobs"
    verb = "paused" if changed else "already paused"
    typer.echo(f"{model}: {verb} ({refusing}; workers claim nothing until resumed)")


@admin_app.command("pause")
def pause_cmd(
    model: ModelArg,
    refuse_submits: Annotated[
        bool | None,
        typer.Option(
            "--refuse-submits/--accept-submits",
            help="Refuse new jobs (503 model_paused) while paused, or queue them. "
            "Default: the model's pause.refuse_submits.",
        ),
    ] = None,
    url: AdminUrlOpt = None,
    key: AdminKeyOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOutOpt = False,
) -> None:
    """Pause MODEL: its workers stop claiming (batches in hand finish) and the
    autoscaler holds its count, until ``sluice admin resume``."""
    body = {} if refuse_submits is None else {"refuse_submits": refuse_submits}
    _say(api(url, key, config).post(f"{ADMIN_PATH}/models/{model}/pause", body), as_json)


@admin_app.command("resume")
def resume_cmd(
    model: ModelArg,
    url: AdminUrlOpt = None,
    key: AdminKeyOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOutOpt = False,
) -> None:
    """Resume a paused MODEL: its workers claim again at once."""
    _say(api(url, key, config).post(f"{ADMIN_PATH}/models/{model}/resume"), as_json)
