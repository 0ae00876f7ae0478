"""The load generator behind ``sluice bench load`` and the stack benchmarks (bench/stack.py)."""
