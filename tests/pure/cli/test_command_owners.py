"""``sluice.cli.OWNERS``: the plugins ``main`` imports for a command are the ones
that register it, and a process started for one command imports no other
process package."""

from __future__ import annotations

import importlib
import subprocess
import sys

import typer

import sluice.cli as cli


def _top_names(app: typer.Typer) -> set[str]:
    cmd = typer.main.get_command(app)
    return set(getattr(cmd, "commands", {}))


def _registers(name: str) -> set[str]:
    app, bench = typer.Typer(), typer.Typer()
    app.add_typer(bench, name="bench")  # every app has bench; only sluicebench fills it
    if name == "sluice.bulk":
        cli._add_bulk(app, bench)
    elif name == "sluice.admin":
        cli._add_admin(app, bench)
    else:
        importlib.import_module(name).register(app, bench)
    if name == "bulkworker.cli":
        return {"bulk"}  # it adds ``worker`` under ``sluice bulk``
    names = _top_names(app) - ({"bench"} if name != "sluicebench.cli" else set())
    return names


def test_every_command_has_its_owners_and_nothing_else() -> None:
    every = _top_names(cli.app)
    assert set(cli.OWNERS) == every
    by_plugin = {name: _registers(name) for name in cli.ALL}
    for command, owners in cli.OWNERS.items():
        assert {p for p, names in by_plugin.items() if command in names} == set(owners), command


def test_needed_reads_the_first_word() -> None:
    assert cli.needed(["worker", "--config", "x.yaml"]) == ("workers.cli",)
    assert cli.needed(["up"]) == ()
    assert cli.needed(["--help"]) is None
    assert cli.needed([]) is None
    assert cli.needed(["nonsense"]) is None


def test_a_worker_start_imports_no_other_process_package() -> None:
    code = (
        "import sys\n"
        "from sluice import cli\n"
        "sys.argv = ['sluice', 'worker', '--help']\n"
        "try:\n"
        "    cli.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "mods = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(mods & {'gateway', 'autoscaler', 'notifier', 'bulkworker', 'sluicebench'}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
