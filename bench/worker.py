"""Worker benchmark: the same as ``sluice bench worker`` (see workers/bench.py).

.venv/bin/python bench/worker.py [--texts N] [--max-batch 32] [--seed 7] [--threads 0]
                                 [--json PATH]
"""

from __future__ import annotations

import sys

from sluice.cli import main

if __name__ == "__main__":
    sys.argv[1:1] = ["bench", "worker"]
    main()
