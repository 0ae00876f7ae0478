"""Stack benchmarks 1 and 2 of issue 6: the same as ``sluice bench stack``.

.venv/bin/python bench/stack.py [--only scaling|mixed|both] [--workers 1,2,5,10]
                                [--base-ms 10] [--mixed-workers 4] [--short-ms 20]
                                [--json PATH]

Logic in sluice/loadgen/stack_bench.py (scaling) and sluice/loadgen/mixed_bench.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/gateway.py is named like the gateway package: with this directory first
# on the path, ``import gateway`` would find that script, so put the repo first.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from sluice.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.argv[1:1] = ["bench", "stack"]
    main()
