"""A script's declaration and its Lua agree: the Lua reads its arguments by the
declared names (from the generated prologue), never ARGV by position, uses every
fixed name and group field, and builds its reply through the generated helpers.
Every script under sluice/ has a declaration, and is sent with its prologue."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

import sluice
from sluice.signature import Signature
from tests.kit.signatures import by_hand, code, disagreements, sent_scripts

# Every script: (its package, its declaration, its source as sent to Redis).
SCRIPTS = sent_scripts()


def _body(package: str, script: str) -> str:
    """The script as written (no generated parts), comments dropped."""
    text = (resources.files(package) / "lua" / f"{script}.lua").read_text()
    return code(text)


def test_every_script_under_sluice_is_declared() -> None:
    root = Path(sluice.__file__).parent
    found = set()
    for path in root.rglob("*.lua"):
        if not path.name.startswith("_"):  # shared includes: no ARGV of their own
            package = path.parent.parent.relative_to(root).as_posix()  # "." for sluice/lua
            found.add(f"{'lua' if package == '.' else package}/{path.stem}")
    assert found == set(SCRIPTS)


def test_nothing_under_sluice_reads_argvby_hand() -> None:
    """Includes too: only the generated prologues index ARGV."""
    for path in Path(sluice.__file__).parent.rglob("*.lua"):
        assert by_hand(path.read_text()) == [], path


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_script_reads_no_argv_by_hand_and_uses_every_name(name: str) -> None:
    package, sig, _ = SCRIPTS[name]
    assert disagreements(sig, _body(package, sig.script)) == []


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_prologue_is_generated_into_the_script(name: str) -> None:
    package, sig, sent = SCRIPTS[name]
    prologue = sig.lua_prologue(
        (resources.files(package) / "lua" / f"{sig.script}.lua").read_text()
    )
    if name.startswith("lua/"):  # sent with EVAL on every call, without comment lines
        prologue = "".join(ln + "\n" for ln in prologue.splitlines() if not ln.startswith("--"))
    assert prologue in sent + "\n"
    reads = re.findall(r"^local (\w+) = (?:tonumber\()?ARGV\[(\d+)\]", prologue, re.M)
    assert [(n, int(i)) for n, i in reads] == [(n, i + 1) for i, n in enumerate(sig.names)]
    assert f"local FIRST_GROUP = {len(sig.names) + 1}" in prologue


def test_pack_orders_by_declaration_and_refuses_a_wrong_name() -> None:
    sig = Signature("t", (("a", "str"), ("b", "num")), group=(("x", "str"), ("y", "num")))
    assert sig.pack({"b": 2, "a": "x"}) == ["x", 2]
    groups = [{"y": 1, "x": "p"}, {"x": "q", "y": 2}]
    assert sig.pack({"b": 2, "a": "x"}, groups) == ["x", 2, "p", 1, "q", 2]
    with pytest.raises(ValueError, match=r"missing \['b'\]"):
        sig.pack({"a": "x"})
    with pytest.raises(ValueError, match=r"unknown \['c'\]"):
        sig.pack({"a": "x", "b": 2, "c": 3})
    with pytest.raises(ValueError, match=r"group: missing \['y'\]"):
        sig.pack({"a": "x", "b": 2}, [{"x": "p"}])


def test_unpack_names_the_reply_and_refuses_a_reply_that_does_not_fit() -> None:
    sig = Signature("t", (), reply=("state", "now"), reply_group=("id", "n"))
    assert sig.unpack(["ok", 5, "a", 1, "b", 0]) == (
        {"state": "ok", "now": 5},
        [{"id": "a", "n": 1}, {"id": "b", "n": 0}],
    )
    assert sig.unpack(["ok", 5]) == ({"state": "ok", "now": 5}, [])
    assert Signature("t", (), reply=("a", "b")).unpack([1, 0]) == ({"a": 1, "b": 0}, [])
    for bad in (["ok"], ["ok", 5, "a"]):
        with pytest.raises(ValueError, match="does not fit"):
            sig.unpack(bad)


def test_the_checker_catches_a_read_by_hand_and_an_unused_name() -> None:
    sig = Signature("t", (("a", "str"), ("b", "num")))
    assert disagreements(sig, "local x = a .. ARGV[2]") == ["ARGV[2]", "b"]
    assert disagreements(sig, "local x = a + b") == []
    grouped = Signature("t", (("a", "str"),), group=(("id", "str"),), reply=("n",))
    assert disagreements(grouped, "local x = a .. ARGV[FIRST_GROUP + 1]") == [
        "ARGV[FIRST_GROUP + 1]",
        "group.id",
        "arg_group",
        "reply.n",
        "reply",
    ]
    body = "local x = a .. arg_group(1).id\nreturn reply{n = 1}"
    assert disagreements(grouped, body) == []
    # The table-free forms: every declared name, in declared order, or a disagreement.
    rows = Signature("t", (), group=(("id", "str"), ("n", "num")), reply_group=("id", "n"))
    good = "local id, n = arg_fields(1)\nreply_row(out, id, n)"
    assert disagreements(rows, good) == []
    assert disagreements(rows, "local n, id = arg_fields(1)\nreply_row(out, n, id)") == [
        "arg_fields ['n', 'id']",
        "reply_row ['n', 'id']",
    ]
    assert disagreements(rows, "local t = {arg_fields(1)}\nreply_row(out, x.a, 1)") == [
        "arg_fields not read into a list of locals",
        "reply_row not given a list of names",
        "group.id",
        "group.n",
        "arg_group",
        "reply_group.id",
        "reply_group.n",
        "reply_group",
    ]
    assert "arg_fields" in rows.lua_prologue(good) and "arg_fields" not in rows.lua_prologue()
    # A '0' is read without a parse; parse_strict parses the rest by arithmetic.
    num = (("a", "num"),)
    plain, strict = (Signature("t", num, parse_strict=p).lua_prologue() for p in (False, True))
    assert "local a = ARGV[1] == '0' and 0 or tonumber(ARGV[1])" in plain
    assert "local a = ARGV[1] == '0' and 0 or ARGV[1] + 0" in strict
    # An include has no declaration: any ARGV index outside a comment is a breach.
    assert by_hand("-- ARGV[1] the id\nlocal x = ARGV[#ARGV] -- ARGV[2]") == ["ARGV[#ARGV]"]
