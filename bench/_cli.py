"""Shared start of the bench/ scripts: each is ``sluice bench <name>`` by another path.

Python puts this directory first on sys.path, where ``gateway.py`` and
``worker.py`` would shadow the packages of the same names; the repository root
goes in front of it. This directory stays on the path: a benchmark's spawned
processes re-import the script, and with it this module.
"""

from __future__ import annotations

import sys
from pathlib import Path


def run(*command: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from sluice.cli import main

    sys.argv[1:1] = list(command)
    main()
