"""``sluice.lua_loader.drop_unused``: a shared helper goes only when nothing else in
the script names it (ADR 0177), whatever the shape of the helpers beside it."""

from __future__ import annotations

import re

from sluice.lua_loader import _SHARED_BEGIN, _SHARED_END, drop_unused
from tests.kit.signatures import sent_scripts

# Lua's own functions the scripts call (Redis's `redis.*`, `cjson.*` are reached by a dot).
LUA_BUILTINS = {
    "assert",
    "error",
    "ipairs",
    "next",
    "pairs",
    "pcall",
    "rawget",
    "rawset",
    "select",
    "setmetatable",
    "getmetatable",
    "tonumber",
    "tostring",
    "type",
    "unpack",
    "xpcall",
}


def _script(shared: str, body: str) -> str:
    return f"{_SHARED_BEGIN}{shared}{_SHARED_END}{body}"


def test_an_unused_one_line_function_does_not_take_the_next_function_with_it() -> None:
    shared = "local function tiny(x) return x end\nlocal function used(y)\n  return y\nend\n"
    out = drop_unused(_script(shared, "return used(1)\n"))
    assert "local function used(y)" in out


def test_a_double_dash_inside_a_string_hides_no_name_after_it() -> None:
    shared = "local function helper(x)\n  return x\nend\n"
    out = drop_unused(_script(shared, "local s = 'a--b' .. helper(1)\nreturn s\n"))
    assert "local function helper(x)" in out


def test_helpers_nothing_names_are_dropped_and_named_ones_kept() -> None:
    shared = "local function gone(x)\n  return x\nend\nlocal kept = 3\nlocal unused = 4\n"
    out = drop_unused(_script(shared, "-- gone(1) in a comment does not count\nreturn kept\n"))
    assert "local function gone" not in out and "local unused" not in out
    assert "local kept = 3" in out


def test_no_script_as_sent_calls_a_function_it_does_not_define() -> None:
    # Every function a script as sent calls is defined in it (a helper dropped while
    # still called would fail only when its path runs): the scripts' own names, the
    # shared helpers that survived the drop, and Lua's builtins.
    for where, (_, _, text) in sent_scripts().items():
        code = re.sub(r"'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"", "''", text)
        code = re.sub(r"--[^\n]*", "", code)
        defined = set(re.findall(r"\bfunction (\w+)\(", code))
        defined |= set(re.findall(r"\blocal ([\w, ]+?)\s*=", code))
        defined = {n.strip() for d in defined for n in d.split(",")}
        defined |= {
            p.strip()
            for ps in re.findall(r"function\s*\w*\(([^)]*)\)", code)
            for p in ps.split(",")
        }
        called = set(re.findall(r"(?<![.:\w])(\w+)\s*\(", code)) - {
            "function",
            "if",
            "and",
            "or",
            "not",
            "return",
            "while",
            "until",
            "in",
            "elseif",
        }
        missing = called - defined - LUA_BUILTINS
        assert not missing, f"{where}: calls {sorted(missing)}, defined nowhere in it"
