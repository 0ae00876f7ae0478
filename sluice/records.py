"""What Sluice stores in Redis beyond the key names: the layouts, in one place.

``sluice.keys`` names every key; this module owns what the values look like
where more than one program reads or writes them:

- **queue score**: an entry of a bucket's queue sorted set scores
  ``priority rank x SCORE_SCALE + arrival sequence``, so one range per class
  holds that class in arrival order. Only ``sluice.queue`` builds or reads
  scores (``QueueOps.class_heads`` gives the counts the autoscaler needs).
- **wait histogram**: the claim script adds each claimed job's queue wait to a
  hash per ``WAIT_WINDOW_S`` window (field = bucket upper bound in ms, or
  ``inf``, plus ``count``), kept ``WAIT_HIST_TTL_S``; ``sluice.waits`` reads it.
  The complete script keeps the end-to-end latency histogram in the same layout.

The Lua scripts get these values from :func:`lua_constants`, prepended to every
script by ``sluice.queue.scripts.script_source``: no script spells them out.
"""

from __future__ import annotations

SCORE_SCALE = 10**12  # a priority rank's share of the queue score (seq < 1e12)

WAIT_WINDOW_S = 10  # one histogram hash per window of this length
WAIT_HIST_TTL_S = 3600  # each window's hash expires this long after its last write
WAIT_BOUNDS_MS: tuple[int, ...] = (
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1000,
    2500,
    5000,
    10000,
    30000,
    60000,
)
WAIT_LABELS: tuple[str, ...] = (*(str(b) for b in WAIT_BOUNDS_MS), "inf")


def score_range(rank: int) -> tuple[str, str]:
    """ZRANGEBYSCORE/ZCOUNT bounds of one priority class's entries (min, exclusive max)."""
    return f"{rank * SCORE_SCALE}", f"({(rank + 1) * SCORE_SCALE}"


def lua_constants() -> str:
    """The layouts above as Lua locals, for the start of every script."""
    bounds = ", ".join(str(b) for b in WAIT_BOUNDS_MS)
    return "\n".join(
        (
            "-- Generated from sluice/records.py: edit there, not here.",
            f"local SCORE_SCALE = {SCORE_SCALE}",
            f"local WAIT_WINDOW_MS = {WAIT_WINDOW_S * 1000}",
            f"local WAIT_HIST_TTL_S = {WAIT_HIST_TTL_S}",
            f"local WAIT_BOUNDS_MS = {{{bounds}}}",
            "",
        )
    )
