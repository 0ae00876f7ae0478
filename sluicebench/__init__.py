"""sluicebench: how Sluice is measured, kept out of the product.

Every ``sluice bench ...`` command lives here (``sluicebench/cli.py`` registers
them; sluice/cli.py names this package in its plugin list), with what they
need: the queue-hop benchmark and its RQ baseline, the gateway, worker and
fleet benchmarks, the HTTP load generator with its workloads and reports and
the one lean HTTP client every benchmark sends through (``loadgen/http.py``),
the stack, soak and bulk runs (``loadgen/``; their processes start through the
product's own ``sluice.local.children``), and the argparse programs under
``scripts/`` (faults, dashboard, claim check, strict JSON, API-key cost).
Results go to ``bench/results/`` and ``docs/benchmarks/``.

Nothing in sluice/, gateway/, workers/ or autoscaler/ imports this package
(tests/pure/repo/test_import_rules.py checks it); it imports theirs.
"""

from __future__ import annotations

from typing import Any


def noop(*args: Any, **kwargs: Any) -> Any:
    """The no-op job (returns None): the handler of the queue-hop benchmark, and RQ's job function.

    It lives in an importable module because RQ's worker imports its job
    function by dotted name.
    """
    return None
