"""The ``sluice`` command in a test: as a long-running child, started through
sluice.local.children like every other process a test starts, or run once in the
test's own process (:func:`in_process`)."""

from __future__ import annotations

from typer.testing import CliRunner, Result

from sluice.cli import app
from sluice.local.children import Child
from tests.waits import HUNG_S, wait_until


def in_process(*args: str) -> Result:
    """``sluice ARGS`` through the command line's own app in this process: a child
    per command spends about 1 CPU s on its imports. An exception other than the
    command's exit is raised on."""
    done = CliRunner().invoke(app, list(args))
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raise done.exception
    return done


def first_line(child: Child, timeout_s: float = HUNG_S) -> str:
    """The first line ``child`` printed (stdout and stderr share its log), once whole;
    fails if it exits first."""

    def printed() -> bool:
        assert child.alive() or child.log_path.read_text().count("\n"), (
            f"{child.name} exited with {child.proc.returncode}: {child.log_path.read_text()}"
        )
        return "\n" in child.log_path.read_text()

    wait_until(printed, timeout_s, f"{child.name}'s first line", 0.05)
    return child.log_path.read_text().split("\n", 1)[0].strip()
