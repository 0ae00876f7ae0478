"""Documentation stays navigable: every relative link resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = [
        target
        for target in LINK.findall(doc.read_text())
        if "://" not in target
        and not target.startswith("mailto:")
        and not (doc.parent / target).exists()
    ]
    assert not broken, f"{doc.relative_to(ROOT)} links to missing {broken}"


def test_every_adr_is_numbered_and_titled() -> None:
    adrs = sorted((ROOT / "docs" / "adr").glob("[0-9]*.md"))
    assert adrs
    numbers = [p.name[:4] for p in adrs]
    assert all(n.isdigit() for n in numbers) and len(set(numbers)) == len(numbers)
    for p in adrs:
        assert p.read_text().startswith("# "), f"{p.name} has no title"


def test_the_adr_index_lists_every_adr() -> None:
    index = (ROOT / "docs" / "adr" / "README.md").read_text()
    listed = set(LINK.findall(index))
    adrs = sorted((ROOT / "docs" / "adr").glob("[0-9]*.md"))
    missing = [p.name for p in adrs if p.name not in listed]
    assert not missing, f"docs/adr/README.md does not list {missing}"
