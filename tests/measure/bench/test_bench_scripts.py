"""Every benchmark is a ``sluice bench`` command of the measurement package, and starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sluice.cli import app, bench_app

ROOT = Path(__file__).resolve().parents[3]
COMMANDS = sorted(c.name for c in bench_app.registered_commands if c.name)


def test_bench_holds_results_not_code() -> None:
    assert not list((ROOT / "bench").glob("*.py"))  # nothing shadows a package any more


def test_docs_run_benchmarks_as_commands_not_scripts() -> None:
    # A doc naming a bench/*.py script sends a reader to a file that is gone.
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    stale = [
        f"{d.relative_to(ROOT)}: {m.group(0)}"
        for d in docs
        if d.name != "0120-measurement-wing.md"  # the ADR names what it replaced
        for m in re.finditer(r"python bench/\w+\.py", d.read_text())
    ]
    assert stale == []


def test_every_sluice_bench_command_the_docs_name_is_registered() -> None:
    # A renamed or dropped command leaves a doc, or a make target, that fails.
    # ADRs are records of a decision (0120 writes ``sluice bench x``), not instructions.
    guides = [d for d in sorted((ROOT / "docs").rglob("*.md")) if "adr" not in d.parts]
    docs = [ROOT / "README.md", ROOT / "Makefile", *guides]
    named = {
        (d.relative_to(ROOT).as_posix(), m)
        for d in docs
        for m in re.findall(r"sluice bench ([a-z][a-z0-9-]*)", d.read_text())
    }
    assert len(named) > 10
    assert sorted(n for n in named if n[1] not in COMMANDS) == []


def test_every_benchmark_registers_from_sluicebench() -> None:
    modules = {c.callback.__module__ for c in bench_app.registered_commands if c.callback}
    assert all(m.startswith("sluicebench.") for m in modules), modules
    assert {
        "queue",
        "gateway",
        "worker",
        "autoscaler",
        "dispatch",
        "load",
        "stack",
        "soak",
        "bulk",
        "faults",
        "dashboard",
        "auth-submit",
        "claim-check",
        "strict-json",
    } <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_command_answers_help(name: str) -> None:
    # In this process, through typer's runner: a `python -m sluice` child per
    # command spent about 1 CPU s on imports each (26 commands: 28 CPU s of the
    # suite, docs/benchmarks/suite.md). The entry point in a fresh interpreter is
    # test_the_bench_entry_point_lists_every_command's.
    out = CliRunner().invoke(app, ["bench", name, "--help"])
    assert out.exit_code == 0, out.output[-500:]
    assert "usage" in out.output.lower()  # typer says Usage, argparse usage


def test_the_bench_entry_point_lists_every_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sluice", "bench", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"COLUMNS": "200"},  # one command a line, however it is run
    )
    assert out.returncode == 0, out.stderr[-500:]
    listed = set(re.findall(r"^[│|]\s+([a-z][a-z0-9-]*)\s", out.stdout, re.MULTILINE))
    assert set(COMMANDS) <= listed, sorted(set(COMMANDS) - listed)


def test_a_benchmark_whose_workers_are_spawned_processes_runs(tmp_path: Path) -> None:
    # Spawned workers re-import the benchmark's module: it must resolve there too.
    out_json = tmp_path / "q.json"
    args = [
        "--jobs",
        "200",
        "--rq-jobs",
        "20",
        "--batch-sizes",
        "8",
        "--workers",
        "1",
        "--repeat",
        "1",
        "--json",
        str(out_json),
    ]
    out = subprocess.run(
        [sys.executable, "-m", "sluice", "bench", "queue", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-800:]
    assert out_json.exists()
