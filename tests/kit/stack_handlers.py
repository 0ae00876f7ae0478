"""Handlers for fault tests, loaded by worker processes as ``tests.kit.stack_handlers:Class``.

No torch here: a worker process with these handlers starts in well under a second.
"""

from __future__ import annotations

import itertools
import os
import secrets
from typing import Any

from workers.handlers.base import Collated
from workers.handlers.synthetic import SyntheticHandler

_RUN = f"{os.getpid()}-{secrets.token_hex(3)}"


class StampedHandler(SyntheticHandler):
    """The synthetic handler, but every result names the process and batch that made it.

    Two runs of one job give two different results, so a test can tell whether
    a client ever saw a job's result change.
    """

    _batches = itertools.count()

    def postprocess(self, output: Any, batch: Collated) -> list[Any]:
        run = f"{_RUN}-{next(self._batches)}"
        return [{"tokens": cost, "run": run} for cost in output]


class BrokenHandler(SyntheticHandler):
    """Every batch fails, as on a worker whose device is gone."""

    def infer(self, batch: Collated) -> Any:
        raise RuntimeError("device lost (fault test)")
