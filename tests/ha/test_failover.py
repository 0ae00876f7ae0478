"""A Sentinel failover under steady load, on real processes: SIGKILL the primary,
and with ``queue.durability: replica`` every job that got a 202 finishes once with
its own result. Nothing but the dead Redis is restarted; no 500 is ever answered.

The harness is the benchmark's (sluicebench/failover.py), which also reports the
``primary`` setting's losses (docs/reliability.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sluicebench.failover import run_failover

pytestmark = [pytest.mark.slow]


def test_replica_durability_loses_nothing_across_a_failover(tmp_path: Path) -> None:
    # The replica stops receiving the primary's stream 1 s before the kill (what a
    # slow link does): with "primary" durability the jobs accepted in that second
    # are lost (sluice bench redis-ha measures it); with "replica" none got a 202.
    out = run_failover("replica", tmp_path, before_s=2.0, after_jobs=40, lag_s=1.0)
    summary = out.summary()
    assert summary["accepted"] > 40, summary
    assert out.lost == [] and out.wrong == [] and out.id_changed == [], summary
    assert out.crashed == [], summary
    assert out.decisions_after_kill > 0, summary  # the autoscaler kept its loop
    assert not any(500 <= s < 600 and s != 503 for s in out.statuses), summary
    # Long-polls through the switch: answered (200) or told to retry (503), never a 500.
    assert out.long_polls[200] > 0 and set(out.long_polls) <= {200, 503}, summary
    # The switch was seen (503s or dropped connections), and the stack went on by itself.
    assert out.first_202_after_s is not None and out.first_done_after_s is not None, summary
    for log in tmp_path.glob("*.log"):
        text = log.read_text(errors="replace")
        assert "Traceback" not in text, f"{log.name}:\n{text[-3000:]}"
