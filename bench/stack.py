"""Stack benchmarks 1 and 2 of issue 6: the same as ``sluice bench stack``.

.venv/bin/python bench/stack.py [--only scaling|mixed|both] [--workers 1,2,5,10]
                                [--base-ms 10] [--mixed-workers 4] [--short-ms 20]
                                [--json PATH]

Logic in sluice/loadgen/stack_bench.py (scaling) and sluice/loadgen/mixed_bench.py.
"""

from _cli import run

if __name__ == "__main__":
    run("bench", "stack")
