"""A script's declared ARGV and its Lua agree: the Lua reads every fixed argument by
the declared name (from the generated prologue), never by position, and uses each."""

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
    """Declared positions the body reads by number, and declared names it never uses."""
    positions = {int(n) for n in re.findall(r"ARGV\[(\d+)\]", body)}
    by_number = [f"ARGV[{i}]" for i in sorted(positions & set(range(1, sig.first_group)))]
    return by_number + [n for n in sig.names if not re.search(rf"\b{n}\b", body)]


@pytest.mark.parametrize("sig", SIGNATURES.values(), ids=list(SIGNATURES))
def test_the_script_reads_no_declared_position_and_uses_every_name(sig: Signature) -> None:
    assert _disagreements(sig, _body(sig.script)) == []


@pytest.mark.parametrize("sig", SIGNATURES.values(), ids=list(SIGNATURES))
def test_the_prologue_is_generated_into_the_script(sig: Signature) -> None:
    prologue = sig.lua_prologue()
    assert prologue in script_source(sig.script)
    reads = re.findall(r"^local (\w+) = (?:tonumber\()?ARGV\[(\d+)\]", prologue, re.M)
    assert [(n, int(i)) for n, i in reads] == [(n, i + 1) for i, n in enumerate(sig.names)]
    assert f"local FIRST_GROUP = {len(sig.names) + 1}" in prologue


def test_pack_orders_by_declaration_and_refuses_a_wrong_name() -> None:
    sig = Signature("t", (("a", "str"), ("b", "num")))
    assert sig.pack({"b": 2, "a": "x"}) == ["x", 2]
    with pytest.raises(ValueError, match=r"missing \['b'\]"):
        sig.pack({"a": "x"})
    with pytest.raises(ValueError, match=r"unknown \['c'\]"):
        sig.pack({"a": "x", "b": 2, "c": 3})


def test_the_checker_catches_a_positional_read_and_an_unused_name() -> None:
    sig = Signature("t", (("a", "str"), ("b", "num")))
    assert _disagreements(sig, "local x = a .. ARGV[2]") == ["ARGV[2]", "b"]
    assert _disagreements(sig, "local x = a + b + ARGV[3]") == []  # ARGV[3]: a group
