"""House rules on imports, read from the source with ast (nothing is imported).

- sluice/, gateway/ and autoscaler/ never import torch (workers/ may).
- sluice/ imports no app package (gateway, workers, autoscaler, sluicebench)
  except through sluice/cli.py's ``PLUGINS`` tuple, which names their CLIs.
- Nothing outside sluicebench/ and tests/ imports sluicebench.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("gateway", "workers", "autoscaler", "sluicebench")
PRODUCT = ("sluice", "gateway", "workers", "autoscaler")


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, top-level module) of every import in a file, at any depth."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module.split(".")[0]


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _breaches(packages: tuple[str, ...], banned: tuple[str, ...]) -> list[str]:
    return [
        f"{p.relative_to(ROOT)}:{line} imports {mod}"
        for pkg in packages
        for p in _files(pkg)
        for line, mod in _imports(p)
        if mod in banned
    ]


def test_the_rules_see_every_package() -> None:
    for pkg in (*PRODUCT, "sluicebench"):
        assert len(_files(pkg)) > 3, pkg


@pytest.mark.parametrize("package", ["sluice", "gateway", "autoscaler"])
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
    assert names == ("gateway.cli", "workers.cli", "autoscaler.cli", "sluicebench.cli")


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
    assert {"gateway", "workers", "autoscaler", "deploy"} <= set(others)
    assert _breaches(others, ("sluicebench",)) == []


def test_the_checker_catches_a_breach(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    import torch\n    from sluicebench.cli import register\n")
    assert [m for _, m in _imports(bad)] == ["torch", "sluicebench"]
