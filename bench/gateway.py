"""Gateway benchmark: the same as ``sluice bench gateway`` (see gateway/bench.py).

.venv/bin/python bench/gateway.py [--rates 500,1000] [--duration-s 5] [--processes 1,2]
                                  [--longpoll-rate 500] [--json PATH]
"""

from _cli import run

if __name__ == "__main__":
    run("bench", "gateway")
