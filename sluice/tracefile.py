"""Trace files: one CSV format for the simulator and the load generator."""

from __future__ import annotations

import csv
from pathlib import Path

from sluice.errors import ConfigError


def read_trace_csv(path: Path) -> list[tuple[float, float]]:
    """(seconds from the first arrival, cost) pairs, sorted by time.

    The CSV has a header naming ``time_s`` (or ``t``) and ``cost`` columns; rows may
    come in any order. Errors name the file and what is wrong, as ConfigError.
    """
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read trace: {e.strerror}") from e
    if not rows:
        raise ConfigError(f"{path}: empty trace")
    tcol = "time_s" if "time_s" in rows[0] else "t"
    if tcol not in rows[0] or "cost" not in rows[0]:
        raise ConfigError(f"{path}: need columns time_s and cost, got {list(rows[0])}")
    try:
        pairs = sorted((float(r[tcol]), float(r["cost"])) for r in rows)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{path}: bad number in trace: {e}") from e
    t0 = pairs[0][0]
    return [(t - t0, c) for t, c in pairs]
