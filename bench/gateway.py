"""Gateway benchmark: the same as ``sluice bench gateway`` (see gateway/bench.py).

.venv/bin/python bench/gateway.py [--rates 500,1000] [--duration-s 5] [--processes 1,2]
                                  [--longpoll-rate 500] [--json PATH]
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is named like the gateway package: drop its own directory from the
# path so ``import gateway`` finds the package, not this script.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from sluice.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.argv[1:1] = ["bench", "gateway"]
    main()
