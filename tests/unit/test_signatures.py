"""A script's declaration and its Lua agree: the Lua reads its arguments by the
declared names (from the generated prologue), never ARGV by position, uses every
fixed name and group field, and builds its reply through the generated helpers."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from sluice.queue.scripts import script_source
from sluice.queue.signatures import SIGNATURES, Signature


def _body(script: str) -> str:
    """The script as written (no generated parts), comments dropped."""
    text = (resources.files("sluice.queue") / "lua" / f"{script}.lua").read_text()
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def _disagreements(sig: Signature, body: str) -> list[str]:
    """ARGV read by hand, and declared names (fixed, group fields, reply) never used."""
    by_hand = re.findall(r"ARGV\[[^\]]*\]", body)
    unused = [n for n in sig.names if not re.search(rf"\b{n}\b", body)]
    unused += [f"group.{n}" for n in sig.group_names if not re.search(rf"\.{n}\b", body)]
    if sig.group and "arg_group(" not in body:
        unused.append("arg_group")
    unused += [f"reply.{n}" for n in sig.reply if not re.search(rf"\b{n}\s*=", body)]
    if sig.reply and "reply{" not in body:
        unused.append("reply")
    unused += [f"reply_group.{n}" for n in sig.reply_group if not re.search(rf"\b{n}\s*=", body)]
    if sig.reply_group and "reply_group(" not in body:
        unused.append("reply_group")
    return by_hand + unused


@pytest.mark.parametrize("sig", SIGNATURES.values(), ids=list(SIGNATURES))
def test_the_script_reads_no_argv_by_hand_and_uses_every_name(sig: Signature) -> None:
    assert _disagreements(sig, _body(sig.script)) == []


@pytest.mark.parametrize("sig", SIGNATURES.values(), ids=list(SIGNATURES))
def test_the_prologue_is_generated_into_the_script(sig: Signature) -> None:
    prologue = sig.lua_prologue()
    assert prologue in script_source(sig.script)
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
    assert _disagreements(sig, "local x = a .. ARGV[2]") == ["ARGV[2]", "b"]
    assert _disagreements(sig, "local x = a + b") == []
    grouped = Signature("t", (("a", "str"),), group=(("id", "str"),), reply=("n",))
    assert _disagreements(grouped, "local x = a .. ARGV[FIRST_GROUP + 1]") == [
        "ARGV[FIRST_GROUP + 1]",
        "group.id",
        "arg_group",
        "reply.n",
        "reply",
    ]
    body = "local x = a .. arg_group(1).id\nreturn reply{n = 1}"
    assert _disagreements(grouped, body) == []
