"""``sluice admin``: the group, its shared options and its client (ADR 0151).

Each concern adds its verbs in a module of its own that imports :data:`admin_app`
and is named in :data:`VERBS` (imported when present), so the concerns never edit
one file. Every verb calls the gateway's REST API with ``--url`` / ``$SLUICE_URL``
and ``--key`` / ``$SLUICE_ADMIN_KEY``; without ``--url`` the config's gateway (its
admin listener for admin routes, when it has one) or http://127.0.0.1:8000.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from sluice.cli_common import ConfigOpt, fail, load_required

admin_app = typer.Typer(
    help="Operator actions: dead letters, retries, purges, pause (admin key).",
    no_args_is_help=True,
)
URL_ENV = "SLUICE_URL"
ADMIN_KEY_ENV = "SLUICE_ADMIN_KEY"
ADMIN_PATH = "/v1/admin"
AdminUrlOpt = Annotated[
    str | None,
    typer.Option("--url", envvar=URL_ENV, show_envvar=True, help="Gateway URL."),
]
AdminKeyOpt = Annotated[
    str | None,
    typer.Option("--key", envvar=ADMIN_KEY_ENV, show_envvar=True, help="An admin API key."),
]
JsonOutOpt = Annotated[bool, typer.Option("--json-out", help="Print the answer as JSON.")]
# The modules that add verbs to admin_app (skipped when absent).
VERBS = ("sluice.admin.dead_letters_cli", "sluice.admin.pause_cli")


class AdminApi:
    """The gateway's admin routes; a refusal exits with the gateway's error line."""

    def __init__(self, url: str | None, key: str | None, config: Path | None) -> None:
        self.base, self.admin_base = _bases(url, config)
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}

    def call(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        import httpx

        base = self.admin_base if path.startswith(ADMIN_PATH) else self.base
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            resp = httpx.request(
                method, base + path, json=body, params=query, headers=self.headers, timeout=120
            )
        except httpx.HTTPError as e:
            fail(f"cannot reach the gateway at {base}: {e}", 3)
        if resp.status_code >= 400:
            fail(_error_line(resp))
        return resp.json()

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params=params)

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self.call("POST", path, body=body or {})


def _bases(url: str | None, config: Path | None) -> tuple[str, str]:
    if url:
        return url.rstrip("/"), url.rstrip("/")
    if config is None:
        return "http://127.0.0.1:8000", "http://127.0.0.1:8000"
    gw = load_required(config).gateway
    public = f"http://{gw.host}:{gw.port}"
    return public, (f"http://{gw.admin_host}:{gw.admin_port}" if gw.admin_port else public)


def _error_line(resp: Any) -> str:
    try:
        err = resp.json()["error"]
        return f"{resp.status_code} {err['type']}: {err['message']}"
    except (ValueError, KeyError, TypeError):
        return f"{resp.status_code}: {resp.text[:200]}"


def api(url: str | None, key: str | None, config: Path | None) -> AdminApi:
    return AdminApi(url, key, config)


def show_action(answer: dict[str, Any], as_json: bool = False) -> None:
    """An action's answer: ``<action> <model>: <count> job(s)``, or its JSON."""
    if as_json:
        typer.echo(json.dumps(answer, sort_keys=True))
        return
    typer.echo(f"{answer['action']} {answer['model']}: {answer['count']} job(s)")


@admin_app.command("audit")
def audit_cmd(
    model: Annotated[str | None, typer.Option("--model", "-m", help="One model's.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Newest entries.")] = 50,
    url: AdminUrlOpt = None,
    key: AdminKeyOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOutOpt = False,
) -> None:
    """The operator actions' audit trail, newest first: when, who, what, how many."""
    import time

    entries = api(url, key, config).get(f"{ADMIN_PATH}/audit", limit=limit, model=model)["entries"]
    if as_json:
        typer.echo(json.dumps(entries, sort_keys=True))
        return
    for e in entries:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e["at_ms"] / 1000))
        who = e["actor"] or "-"
        detail = json.dumps(e["detail"], sort_keys=True) if e["detail"] else ""
        what = f"{e['action']:<22} {e['model']:<16} {e['count']:>6}"
        typer.echo(f"{when}Z  {who:<16} {what}  {detail}")


def _register_verbs() -> None:
    for name in VERBS:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)


_register_verbs()
