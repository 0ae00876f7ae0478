"""The soak of issue 8: the same as ``sluice bench soak`` (``make soak`` runs 10 minutes).

.venv/bin/python bench/soak.py [--duration-s 600] [--warmup-s 60] [--workers 2]
                               [--base-ms 20] [--result-ttl-s 30] [--json PATH]

Logic in sluice/loadgen/soak.py (run), soak_sample.py (probe), soak_verdict.py (criteria).
"""

from _cli import run

if __name__ == "__main__":
    run("bench", "soak")
