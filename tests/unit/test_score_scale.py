"""The queue score's priority scale is the same number in Python and in every script."""

from __future__ import annotations

import re

from autoscaler.observe import PRIO_SCALE
from sluice.jobs import PRIORITY_SCORE_SCALE
from sluice.queue.scripts import SCRIPT_NAMES, script_source


def test_every_script_scales_priorities_like_the_python_side() -> None:
    assert PRIO_SCALE == PRIORITY_SCORE_SCALE == 1e12
    literals = {m for n in SCRIPT_NAMES for m in re.findall(r"\d+e\d+", script_source(n))}
    assert literals == {"1e12"}
