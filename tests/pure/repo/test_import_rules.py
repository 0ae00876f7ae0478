"""House rules on imports, read from the source with ast (nothing is imported).

- Only workers/ imports torch (sluice/ and every other process package never).
- sluice/ (the core) imports no process package (gateway, workers, autoscaler,
  notifier, bulkworker) nor sluicebench, except through sluice/cli.py's
  ``PLUGINS`` tuple, which names their CLIs.
- A process package never imports another: each imports the core alone.
- Nothing outside sluicebench/ and tests/ imports sluicebench.
- No test module imports another test module: what tests share is in tests/kit.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PROCESSES = ("gateway", "workers", "autoscaler", "notifier", "bulkworker")
APPS = (*PROCESSES, "sluicebench")
PRODUCT = ("sluice", *PROCESSES)


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, top-level module) of every import in a file, at any depth."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module.split(".")[0]


def _files(package: str, root: Path = ROOT) -> list[Path]:
    return sorted((root / package).rglob("*.py"))


def _breaches(packages: tuple[str, ...], banned: tuple[str, ...], root: Path = ROOT) -> list[str]:
    return [
        f"{p.relative_to(root)}:{line} imports {mod}"
        for pkg in packages
        for p in _files(pkg, root)
        for line, mod in _imports(p)
        if mod in banned
    ]


def _cross_process_breaches(root: Path = ROOT) -> list[str]:
    """Imports of one process package by another."""
    return [
        breach
        for pkg in PROCESSES
        for breach in _breaches((pkg,), tuple(p for p in PROCESSES if p != pkg), root)
    ]


def test_the_rules_see_every_package() -> None:
    for pkg in (*PRODUCT, "sluicebench"):
        assert len(_files(pkg)) > 3, pkg


@pytest.mark.parametrize("package", ["sluice", "gateway", "autoscaler", "notifier", "bulkworker"])
def test_no_torch_outside_workers(package: str) -> None:
    assert _breaches((package,), ("torch",)) == []


def test_sluice_imports_app_packages_only_through_its_plugin_list() -> None:
    assert _breaches(("sluice",), APPS) == []
    cli = ast.parse((ROOT / "sluice" / "cli.py").read_text())
    plugins = next(
        node.value
        for node in cli.body
        if isinstance(node, ast.Assign)
        and any(getattr(t, "id", "") == "PLUGINS" for t in node.targets)
    )
    names = ast.literal_eval(plugins)
    assert names == tuple(f"{app}.cli" for app in APPS)


def test_process_packages_never_import_each_other() -> None:
    assert _cross_process_breaches() == []


def test_nothing_in_the_product_imports_the_measurement_package() -> None:
    # Every folder of the repository but the measurement package and the tests
    # (deploy/ and examples/ too), not the virtual environment or build output;
    # sluice/ is held to the stricter rule above.
    skip = {"sluicebench", "tests", "sluice", "build", "dist"}
    others = tuple(
        d.name
        for d in sorted(ROOT.iterdir())
        if d.is_dir() and d.name not in skip and not d.name.startswith(".") and "." not in d.name
    )
    assert {*PROCESSES, "deploy"} <= set(others)
    assert _breaches(others, ("sluicebench",)) == []


def test_the_checker_catches_a_breach(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    import torch\n    from sluicebench.cli import register\n")
    assert [m for _, m in _imports(bad)] == ["torch", "sluicebench"]


def test_the_checker_catches_a_process_or_the_core_importing_a_process(tmp_path: Path) -> None:
    for pkg in (*PROCESSES, "sluice"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("from sluice import keys\n")
    (tmp_path / "gateway" / "hooks.py").write_text("from notifier.loop import build\n")
    (tmp_path / "bulkworker" / "run.py").write_text("def f():\n    import gateway.state\n")
    assert _cross_process_breaches(tmp_path) == [
        "gateway/hooks.py:1 imports notifier",
        "bulkworker/run.py:2 imports gateway",
    ]
    (tmp_path / "sluice" / "core.py").write_text("from bulkworker.jobs import run_slice\n")
    assert _breaches(("sluice",), APPS, tmp_path) == ["sluice/core.py:1 imports bulkworker"]


# The tiers a test module lives in (tests/conftest.py): a test never imports another
# test module (nor a conftest); what two share lives in tests/kit.
TEST_TIERS = ("pure", "redis", "process", "measure", "gpu")


def _test_module_imports(root: Path = ROOT) -> list[str]:
    found = []
    for p in sorted((root / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ImportFrom) and node.module:
                parts = node.module.split(".")
                if node.level or (parts[0] == "tests" and parts[1:2] and parts[1] in TEST_TIERS):
                    found.append(f"{p.relative_to(root)}:{node.lineno} imports {node.module}")
    return found


def test_no_test_module_imports_another() -> None:
    assert _test_module_imports() == []


def test_the_checker_catches_a_test_importing_a_test(tmp_path: Path) -> None:
    (tmp_path / "tests" / "redis").mkdir(parents=True)
    (tmp_path / "tests" / "redis" / "test_a.py").write_text(
        "from tests.kit.queue import x\n"
        "from tests.pure.core.test_b import y\n"
        "from .conftest import z\n"
    )
    assert _test_module_imports(tmp_path) == [
        "tests/redis/test_a.py:2 imports tests.pure.core.test_b",
        "tests/redis/test_a.py:3 imports conftest",
    ]
