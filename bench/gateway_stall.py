"""Event-loop stall during a large estimate: the same as ``sluice bench gateway-stall``.

.venv/bin/python bench/gateway_stall.py [--json PATH]
"""

from _cli import run

if __name__ == "__main__":
    run("bench", "gateway-stall")
