"""Per-test CPU seconds, for sizing the suite (docs/benchmarks/suite.md).

The suite is CPU-bound on the team's 2-core machine, and wall times there swing
with other people's work; CPU seconds do not. With ``SLUICE_TEST_CPU_LOG=<dir>``
set, each pytest process (every xdist worker) appends one tab-separated line per
test to ``<dir>/cpu-<pid>.tsv``: the node id, the CPU seconds of the pytest
process itself, those of its children waited for during the test (processes it
started and reaped: ``sluice up``, the CLI, redis-servers), and the wall seconds,
setup and teardown included. A module-scoped stack's CPU lands on the test that
tears it down. ``python -m tests.kit.cpuclock <dir>`` sums them up.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

CPU_LOG_ENV = "SLUICE_TEST_CPU_LOG"


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    log_dir = os.environ.get(CPU_LOG_ENV)
    if not log_dir:
        yield
        return
    own, kids, wall = (
        _cpu(resource.RUSAGE_SELF),
        _cpu(resource.RUSAGE_CHILDREN),
        time.monotonic(),
    )
    yield
    own = _cpu(resource.RUSAGE_SELF) - own
    kids = _cpu(resource.RUSAGE_CHILDREN) - kids
    wall = time.monotonic() - wall
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(log_dir) / f"cpu-{os.getpid()}.tsv", "a") as out:
        out.write(f"{item.nodeid}\t{own:.3f}\t{kids:.3f}\t{wall:.3f}\n")


def summarize(log_dir: Path, top: int = 40) -> str:
    """The total CPU and wall seconds, the costliest folders, the longest modules
    and the costliest tests, from the lines the hook wrote."""
    rows = []
    for path in sorted(log_dir.glob("cpu-*.tsv")):
        for line in path.read_text().splitlines():
            nodeid, own, kids, wall = line.split("\t")
            rows.append((nodeid, float(own), float(kids), float(wall)))
    lines = [
        f"{len(rows)} tests: CPU {sum(r[1] + r[2] for r in rows):.0f} s "
        f"(pytest {sum(r[1] for r in rows):.0f}, children {sum(r[2] for r in rows):.0f}), "
        f"wall summed {sum(r[3] for r in rows):.0f} s"
    ]
    folders: dict[str, float] = defaultdict(float)
    for nodeid, own, kids, _ in rows:
        folders[nodeid.split("::")[0].rsplit("/", 1)[0]] += own + kids
    lines.append("folders by CPU s:")
    for folder, cpu in sorted(folders.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {cpu:7.1f}  {folder}")
    modules: dict[str, float] = defaultdict(float)
    for row in rows:
        modules[row[0].split("::")[0]] += row[3]
    lines.append("modules of 15 s of wall or more (tests/kit/schedule.py's LONG_MODULES):")
    for module, secs in sorted(modules.items(), key=lambda kv: -kv[1]):
        if secs >= 15:
            lines.append(f"  {secs:7.1f}  {module}")
    lines.append(f"top {top} tests by CPU s (pytest + children, wall):")
    for nodeid, own, kids, wall in sorted(rows, key=lambda r: -(r[1] + r[2]))[:top]:
        lines.append(f"  {own + kids:6.1f} = {own:6.1f} + {kids:6.1f}  {wall:6.1f}  {nodeid}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarize(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 40))
