"""The stats hash fields and the decision record have one owner (sluice/records.py):
the scripts write the declared fields through the generated ``STAT`` table, spell
none of them out, and every declared field is written by some script."""

from __future__ import annotations

import json
import re
from dataclasses import fields

from autoscaler.decisions import commands, entry
from autoscaler.policy import Decision, Observation
from sluice import records
from sluice.queue.scripts import SCRIPT_NAMES, script_source
from sluice.records import DECISION_NUMBERS, DecisionRecord, Stat

# A stats-hash call in the scripts: the hash is `stats` (or `stats_key`) there.
STATS_CALL = re.compile(r"redis\.call\('H[A-Z]+', stats(?:_key)?, ([^,)]+)")


def _bodies() -> dict[str, str]:
    header = records.lua_constants()
    return {n: script_source(n)[len(header) :] for n in SCRIPT_NAMES}


def test_scripts_name_stats_fields_only_through_the_generated_table() -> None:
    used: set[str] = set()
    for name, body in _bodies().items():
        for field in STATS_CALL.findall(body):
            assert field.startswith(("STAT.", "STAT_BUCKET_COST ..")), (name, field)
        used |= set(re.findall(r"\bSTAT\.(\w+)", body))
    assert used == {s.value for s in Stat}  # every one declared, every declared one written


def test_the_generated_table_is_the_enum() -> None:
    header = records.lua_constants()
    table = re.search(r"local STAT = \{([^}]*)\}", header)
    assert table is not None
    pairs = dict(re.findall(r"(\w+) = '(\w+)'", table.group(1)))
    assert pairs == {s.value: s.value for s in Stat}
    assert f"local STAT_BUCKET_COST = '{records.BUCKET_COST_PREFIX}'" in header
    assert records.bucket_cost_field("128") == "cost:128"


def test_a_decision_is_stored_with_the_declared_fields() -> None:
    obs = Observation(current=1, ready=1, starting=0, queued=7, p99_wait_ms=250.0)
    e = entry(Decision(1, 3, "backlog", 2.613), obs, at_ms=5)
    names = [f.name for f in fields(DecisionRecord)]
    assert list(e.fields()) == names and e.fields()["needed"] == 2.61
    hset, _expire, push, _trim, _ttl = commands("m", e, period_s=5, changed=True)
    stored = dict(zip(hset[2::2], hset[3::2], strict=True))
    assert list(stored) == [*names, records.DECISION_PERIOD_FIELD]
    assert list(json.loads(push[2])) == names
    # A reader parses every field but the reason and its detail back to a number.
    assert DECISION_NUMBERS == set(stored) - {"reason", "detail"}
