"""The order xdist hands out the suite's modules in: the long ones first.

``make test`` runs ``--dist loadscope --no-loadscope-reorder``: each module goes
whole to one worker, in collection order, a worker taking the next module when it
has two tests or fewer left. xdist's own reorder (most tests first) left the
one-test modules that take a minute (the soak, the generation benchmark's smoke
run) to the end, where one worker ran them alone for the last 60-100 s while the
others had finished (docs/benchmarks/suite.md, ADR 0165). Here, on each xdist
worker's collection (the controller schedules from it), the modules named in
``LONG_MODULES`` come first, longest first, then every other module by its count
of tests, most first (xdist's own order for the rest). A plain ``pytest`` run (no
xdist) keeps the file order.

``LONG_MODULES`` holds the modules that took 15 s or more of wall, setup and
teardown included, in a clean-clone ``make test`` (``python -m tests.kit.cpuclock
<dir>`` lists the modules by wall). A path here that no longer exists stops the
collection: a moved module must be named again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# Wall seconds per module, setup and teardown included: the clean-clone CI run at
# 199430a (`-n 4`, the idle 2-core machine; docs/benchmarks/suite.md), after ADRs
# 0172 and 0173 shared the process tests' stacks.
LONG_MODULES: dict[str, float] = {
    "measure/soak/test_soak_run.py": 85,
    "process/faults/test_gateway_restart.py": 57,
    "process/faults/test_redis_faults.py": 43,
    "process/generate/test_up_chat.py": 40,
    "process/gateway/test_schema.py": 37,
    "measure/generate/test_generate_bench_run.py": 35,
    "process/browser/test_dashboard_browser.py": 35,
    "process/generate/test_live_worker.py": 34,
    "pure/autoscaler/test_policy.py": 33,
    "process/e2e/test_bulk.py": 31,
    "process/faults/test_worker_faults.py": 30,
    "process/deploy/test_probe.py": 29,
    "process/e2e/test_operator_actions.py": 27,
    "process/ha/test_failover.py": 25,
    "process/faults/test_bulk_faults.py": 24,
    "process/e2e/test_example_stack.py": 21,
    "redis/webhooks/test_delivery.py": 21,
    "redis/gateway/test_fuzz_schema.py": 18,
    "process/e2e/test_up.py": 17,
}

TESTS_DIR = Path(__file__).resolve().parent.parent


def module_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with each module's tests together, the modules in
    ``LONG_MODULES``'s order first, then the rest by their count of tests (most
    first; ties keep the collection order). Within a module, the order stays."""
    by_module: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def key(module: str) -> tuple[float, int]:
        rel = Path(module).as_posix().removeprefix("tests/")
        return (-LONG_MODULES.get(rel, 0.0), -len(by_module[module]))

    ordered = sorted(by_module, key=key)  # stable: ties keep the collection order
    return [item for module in ordered for item in by_module[module]]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    stale = [m for m in LONG_MODULES if not (TESTS_DIR / m).exists()]
    if stale:
        raise pytest.UsageError(f"tests/kit/schedule.py LONG_MODULES names missing {stale}")
    if hasattr(config, "workerinput"):  # an xdist worker: the controller schedules from this
        items[:] = module_order(items)
