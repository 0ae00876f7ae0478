"""The ``sluice`` command as a long-running child of a test, started through
sluice.local.children like every other process a test starts."""

from __future__ import annotations

from sluice.local.children import Child
from tests.waits import HUNG_S, wait_until


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
