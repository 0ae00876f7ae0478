"""Worker benchmark: the same as ``sluice bench worker`` (see workers/bench.py).

.venv/bin/python bench/worker.py [--texts N] [--max-batch 32] [--seed 7] [--threads 0]
                                 [--json PATH]
"""

from _cli import run

if __name__ == "__main__":
    run("bench", "worker")
