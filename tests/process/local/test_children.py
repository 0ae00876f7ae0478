"""sluice.local.children: the one way a local stack starts and stops ``sluice`` processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.errors import SluiceError
from sluice.local.children import Children


def test_a_child_logs_to_its_file_and_a_dead_one_is_named(tmp_path: Path) -> None:
    group = Children(tmp_path / "logs")
    child = group.spawn("helper-0", ["--help"], role="helper")
    assert child.proc.wait(60) == 0
    assert (child.name, child.role) == ("helper-0", "helper")
    assert group.dead() is child
    with pytest.raises(SluiceError, match=r"helper-0 exited with 0; see .*helper-0\.log"):
        group.check_alive()
    assert group.stop([child], timeout_s=5.0) == []  # already gone: nothing to kill
    assert group.all == [] and child.log.closed
    assert "Usage" in (tmp_path / "logs" / "helper-0.log").read_text()
