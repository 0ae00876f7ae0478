"""The suite's module order under xdist (tests/kit/schedule.py): long modules first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import pytest

from tests.kit.schedule import LONG_MODULES, TESTS_DIR, module_order


@dataclass
class Item:
    nodeid: str


def ids(nodeids: list[str]) -> list[str]:
    items = cast(list[pytest.Item], [Item(n) for n in nodeids])
    return [i.nodeid for i in module_order(items)]


def test_long_modules_first_longest_first_then_by_count_each_module_whole() -> None:
    soak, policy = "tests/measure/soak/test_soak_run.py", "tests/pure/autoscaler/test_policy.py"
    assert LONG_MODULES[soak[6:]] > LONG_MODULES[policy[6:]]
    got = ids(
        [
            "tests/pure/a.py::x",
            f"{policy}::p1",
            "tests/pure/b.py::y1",
            "tests/pure/b.py::y2",
            f"{soak}::s",
            f"{policy}::p2",
            "tests/pure/c.py::z",
        ]
    )
    assert got == [
        f"{soak}::s",
        f"{policy}::p1",
        f"{policy}::p2",
        "tests/pure/b.py::y1",
        "tests/pure/b.py::y2",
        "tests/pure/a.py::x",  # ties keep the collection order
        "tests/pure/c.py::z",
    ]


def test_every_long_module_exists() -> None:
    assert all((TESTS_DIR / m).is_file() for m in LONG_MODULES)
