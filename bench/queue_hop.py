"""Queue-hop benchmark: the same as ``sluice bench queue`` (see sluice/bench/queue_hop.py).

.venv/bin/python bench/queue_hop.py [--jobs N] [--rq-jobs N] [--batch-sizes 1,8,32,128]
                                    [--workers 1,4] [--json PATH]
"""

from _cli import run

if __name__ == "__main__":
    run("bench", "queue")
