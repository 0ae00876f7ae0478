"""``sluice.cli.OWNERS``: the plugins ``main`` imports for a command are the ones
that register it, a process started for one command imports no other process
package, and one that prints help imports none of what a command runs."""

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


# What a process that only prints a command's help must not import: the other
# process packages and the benchmarks, and what only running a command needs (the
# config schema, the Redis client, the gateway's app).
NOT_FOR_HELP = {
    "gateway",
    "workers",
    "autoscaler",
    "notifier",
    "bulkworker",
    "sluicebench",
    "sluice.config",
    "sluice.connection",
    "redis",
    "fastapi",
    "rq",
}


def _imported_by(argv: list[str]) -> set[str]:
    """The modules (and their top packages) a ``sluice ARGV`` process has imported
    once ``main`` returns."""
    code = (
        "import sys\n"
        "from sluice import cli\n"
        f"sys.argv = ['sluice', *{argv!r}]\n"
        "try:\n"
        "    cli.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join({n for m in sys.modules for n in (m, m.split('.')[0])}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return set(out.stdout.strip().splitlines()[-1].split())


def test_a_worker_start_imports_no_other_process_package() -> None:
    assert _imported_by(["worker", "--help"]) & NOT_FOR_HELP == {"workers"}


def test_help_imports_no_command_s_machinery() -> None:
    # `sluice gateway --help` registers the gateway's command alone; `sluice --help`
    # lists every command, each registered without importing what it runs.
    assert _imported_by(["gateway", "--help"]) & NOT_FOR_HELP == {"gateway"}
    every = {"gateway", "workers", "autoscaler", "notifier", "bulkworker", "sluicebench"}
    assert _imported_by(["--help"]) & NOT_FOR_HELP == every
