"""The record layouts of sluice/records.py are what every Lua script uses: the
scripts get them generated, and spell none of them out."""

from __future__ import annotations

import re

from sluice import lua_loader, records
from sluice.queue.scripts import SCRIPT_NAMES, script_source
from sluice.queue.signatures import SIGNATURES


def test_every_script_gets_the_layouts_generated_and_spells_none_out() -> None:
    assert records.SCORE_SCALE == 10**12
    header = records.lua_constants()
    assert "local SCORE_SCALE = 1000000000000" in header
    assert "local WAIT_BOUNDS_MS = {5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, " in header
    for name in SCRIPT_NAMES:
        src = lua_loader.source("sluice.queue", name, SIGNATURES[name], inline=False)
        assert src.startswith(header)
        # as sent: the header's tables (ADR 0168) and constants (ADR 0177) no script
        # names are dropped; the score scale stays exactly where the script uses it
        built = script_source(name).split(lua_loader.GLOBALS_AS_LOCALS, 1)
        assert len(built) == 2
        kept = "local SCORE_SCALE = 1000000000000" in built[0]
        assert kept == bool(re.search(r"\bSCORE_SCALE\b", built[1])), name
        for body in (src[len(header) :], built[1]):
            assert re.findall(r"\d+e\d+", body) == [], name  # the score scale
            assert "60000" not in body and "3600" not in body, name  # histogram bounds, TTL


def test_score_ranges_are_the_classes() -> None:
    assert records.score_range(0) == ("0", "(1000000000000")
    assert records.score_range(3) == ("3000000000000", "(4000000000000")


def test_the_generated_constants_agree_with_python() -> None:
    header = records.lua_constants()
    bounds = re.search(r"WAIT_BOUNDS_MS = \{([^}]*)\}", header)
    assert bounds and tuple(int(b) for b in bounds.group(1).split(",")) == records.WAIT_BOUNDS_MS
    assert f"WAIT_WINDOW_MS = {records.WAIT_WINDOW_S * 1000}" in header
    assert f"WAIT_HIST_TTL_S = {records.WAIT_HIST_TTL_S}" in header
