"""The stats hash fields and the decision record have one owner (sluice/records.py):
the scripts write the declared fields through the generated ``STAT`` table, spell
none of them out, and every declared field is written by some script."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

import sluice
from autoscaler.decisions import commands, entry
from autoscaler.observation import Observation
from autoscaler.policy import Decision
from sluice import lua_loader, records
from sluice.admin import ops as admin_ops
from sluice.admin import signatures as admin_sigs
from sluice.config import PRIORITIES
from sluice.generate import ops as generate_ops
from sluice.generate import signatures as generate_sigs
from sluice.jobs import BULK, priority_rank
from sluice.queue.scripts import SCRIPT_NAMES, script_source
from sluice.queue.signatures import SIGNATURES
from sluice.records import DECISION_NUMBERS, DecisionRecord, Stat

# A stats-hash call in the scripts: the hash is `stats` (or `stats_key`) there.
STATS_CALL = re.compile(r"redis\.call\('H[A-Z]+', stats(?:_key)?, ([^,)]+)")


def _bodies() -> dict[str, str]:
    """Each script as built before its table entries are written as values."""
    header = records.lua_constants()
    scripts = {
        n: lua_loader.source("sluice.queue", n, SIGNATURES[n], inline=False) for n in SCRIPT_NAMES
    }
    scripts["generate_step"] = lua_loader.source(
        "sluice.generate", "step", generate_sigs.SIGNATURES["step"], inline=False
    )
    for n, sig in admin_sigs.SIGNATURES.items():
        scripts[f"admin_{n}"] = lua_loader.source("sluice.admin", n, sig, inline=False)
    assert set(scripts) >= set(generate_ops.scripts()) | set(admin_ops.scripts())
    return {n: text[len(header) :] for n, text in scripts.items()}


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
    assert DECISION_NUMBERS == set(stored) - {"reason", "detail", "pool_reason"}


# -- hash fields: every one a script names comes from a generated table ----------
# Where a hash command names its fields (after the key), by command.
FIELD_ARGS = {"HGET": "one", "HSETNX": "one", "HINCRBY": "one", "HSET": "pairs"}
FIELD_ARGS |= {"HMGET": "all", "HDEL": "all"}


def _calls(code: str) -> list[list[str]]:
    """The top-level arguments of each ``redis.call(...)`` in ``code`` (no comments)."""
    out = []
    for m in re.finditer(r"redis\.call\(", code):
        depth, args, arg, quote = 1, [], "", ""
        for ch in code[m.end() :]:
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch in "({":
                depth += 1
            elif ch in ")}":
                depth -= 1
                if depth == 0:
                    break
            if depth == 1 and not quote and ch == ",":
                args.append(arg.strip())
                arg = ""
            else:
                arg += ch
        out.append([*args, arg.strip()])
    return out


def spelt_fields(code: str) -> list[str]:
    """Quoted literals where a hash command takes a field name."""
    found = []
    for args in _calls(code):
        how = FIELD_ARGS.get(args[0].strip("'\""))
        picked = {"one": args[2:3], "all": args[2:], "pairs": args[2::2]}.get(how or "", [])
        found += [a for a in picked if re.fullmatch(r"'[^']*'", a)]
    return found


def _script_bodies() -> dict[str, str]:
    """Each script as written and each include, comments dropped."""
    out = {}
    for path in Path(sluice.__file__).parent.rglob("*.lua"):
        code = "\n".join(ln.split("--", 1)[0] for ln in path.read_text().splitlines())
        out[f"{path.parent.parent.name}/{path.name}"] = code
    return out


def test_scripts_spell_out_no_hash_field() -> None:
    for name, code in _script_bodies().items():
        assert spelt_fields(code) == [], name


def test_the_field_checker_catches_a_spelt_field() -> None:
    code = """redis.call('HSET', jk, JOB.status, 'queued', 'fin', int(now))
    local f = redis.call('HMGET', dk, DELIVERY.state,
                         'lease')
    redis.call('HINCRBY', stats, STAT.failed, 1)
    redis.call('HGET', bulk, 'token')
    redis.call('ZADD', due, now, 'id')"""
    assert spelt_fields(code) == ["'fin'", "'lease'", "'token'"]


def test_the_generated_field_tables_are_the_enums_and_refuse_a_misspelling() -> None:
    header = records.lua_constants()
    for table, enum in (
        ("JOB", records.JobField),
        ("DELIVERY", records.DeliveryField),
        ("BULK", records.BulkField),
        ("STREAM", records.StreamField),
        ("STREAM_EVENT", records.StreamEvent),
    ):
        m = re.search(rf"local {table} = strict\('{table}', \{{([^}}]*)\}}\)", header)
        assert m is not None, table
        pairs = dict(re.findall(r"\['(\w+)'\] = '(\w+)'", m.group(1)))
        assert pairs == {f.name.lower(): f.value for f in enum}
    assert "error(what .. ': no ' .. k)" in header  # __index on a field not declared


def test_ranks_and_the_delivery_ttl_have_one_owner() -> None:
    assert records.RANKS == (*PRIORITIES, BULK)
    assert [priority_rank(p) for p in records.RANKS] == [0, 1, 2, 3]
    assert "local RANK = strict('RANK', {high = 0, normal = 1, low = 2, bulk = 3})" in (
        records.lua_constants()
    )
    assert f"local HOOK_TTL_S = {records.HOOK_TTL_S}" in records.lua_constants()
    # A bulk job's webhook is stored as a job's is (sluice.jobs.webhook_of reads both).
    for name in ("WHU", "WHE", "WHT", "OWNER"):
        assert records.BulkField[name] == records.JobField[name]


# -- the built scripts: table entries written as their values (ADR 0168) ---------
def test_a_built_script_names_no_table_entry_and_builds_no_unused_table() -> None:
    for name in SCRIPT_NAMES:
        built = script_source(name)
        assert re.findall(r"\b(?:JOB|STAT|DELIVERY|RANK)(?:\.\w|\[')", built) == [], name
        assert "local JOB = " not in built and "local STAT = " not in built, name
    written = "redis.call('HSET', jk, JOB.status, 'succeeded', JOB.result, payload)"
    assert lua_loader.inline_literals(written) == (
        "redis.call('HSET', jk, 'status', 'succeeded', 'result', payload)"
    )
    assert lua_loader.inline_literals("if p == RANK.bulk then x = STREAM_EVENT['end'] end") == (
        "if p == 3 then x = 'end' end"
    )


def test_a_misspelt_entry_fails_when_the_script_is_built() -> None:
    with pytest.raises(ValueError, match="JOB has no 'stauts'"):
        lua_loader.inline_literals("redis.call('HGET', jk, JOB.stauts)")
    table_kept = records.lua_constants() + "for k in pairs(JOB) do end"
    assert "local JOB = strict(" in lua_loader.inline_literals(table_kept)  # still named
