"""Event-loop stall during a large estimate: the same as ``sluice bench gateway-stall``.

.venv/bin/python bench/gateway_stall.py [--json PATH]
"""

from __future__ import annotations

import sys
from pathlib import Path

# Named like nothing in the package, but run from bench/: the repository root first.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from sluice.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.argv[1:1] = ["bench", "gateway-stall"]
    main()
