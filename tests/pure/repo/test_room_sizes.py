"""House rule on room sizes (STYLE.md, "small files, small functions"), read from
the source with ast (nothing is imported).

- No product module is over 500 lines.
- At most three product functions (methods and nested ones included) are over 60
  lines: a fourth means splitting one, not raising the budget.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# The shared core and one package per kind of process (docs: DESIGN.md, "Processes
# and packages"); the notifier's and the bulk worker's once they have their own; and
# the measurement package, which users run too (``sluice bench``).
PRODUCT = ("sluice", "gateway", "workers", "autoscaler", "sluicebench") + tuple(
    p for p in ("notifier", "bulkworker") if (ROOT / p).is_dir()
)
MODULE_LINES = 500
FUNCTION_LINES = 60
LONG_FUNCTIONS_ALLOWED = 3


def _files(packages: tuple[str, ...], root: Path = ROOT) -> list[Path]:
    return sorted(p for pkg in packages for p in (root / pkg).rglob("*.py"))


def long_modules(files: list[Path], root: Path = ROOT) -> list[str]:
    """``path (lines)`` of every module over MODULE_LINES lines."""
    out = []
    for p in files:
        n = len(p.read_text().splitlines())
        if n > MODULE_LINES:
            out.append(f"{p.relative_to(root)} ({n})")
    return out


def long_functions(files: list[Path], root: Path = ROOT) -> list[str]:
    """``path:line name (lines)`` of every function over FUNCTION_LINES lines."""
    out = []
    for p in files:
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > FUNCTION_LINES:
                    out.append(f"{p.relative_to(root)}:{node.lineno} {node.name} ({n})")
    return out


def test_the_rule_sees_every_product_package() -> None:
    for pkg in PRODUCT:
        assert len(_files((pkg,))) >= 3, pkg


def test_no_product_module_is_over_500_lines() -> None:
    assert long_modules(_files(PRODUCT)) == []


def test_at_most_three_product_functions_are_over_60_lines() -> None:
    long = long_functions(_files(PRODUCT))
    assert len(long) <= LONG_FUNCTIONS_ALLOWED, long


def _function(head: str, lines: int, indent: str = "") -> str:
    """``head`` (``def f()``, ``async def g(self)``) with a body: ``lines`` lines in all."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 1))
    return f"{indent}{head}:\n{body}"


def test_the_checker_catches_a_breach(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    at_limit = _function("def f()", FUNCTION_LINES)
    (pkg / "fits.py").write_text(at_limit + "\n" * (MODULE_LINES - FUNCTION_LINES))
    method = "class C:\n" + _function("async def g(self)", FUNCTION_LINES + 1, "    ")
    (pkg / "big.py").write_text(method + "\n" * (MODULE_LINES - FUNCTION_LINES - 1))
    files = _files(("pkg",), tmp_path)
    assert long_functions(files, tmp_path) == [f"pkg/big.py:2 g ({FUNCTION_LINES + 1})"]
    assert long_modules(files, tmp_path) == [f"pkg/big.py ({MODULE_LINES + 1})"]
